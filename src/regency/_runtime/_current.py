"""The runtime of this process (at most one at a time)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._runtime import Runtime

#: The runtime, or None: read it directly where a call costs (the compiled hot path).
active: Runtime | None = None


def get() -> Runtime | None:
    """The runtime of this process, if started."""
    return active


def set_runtime(rt: Runtime | None) -> None:
    """Install (or clear) the runtime of this process."""
    global active
    active = rt
