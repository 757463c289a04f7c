"""The runtime of this process (at most one at a time)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._runtime import Runtime

_runtime: Runtime | None = None


def get() -> Runtime | None:
    """The runtime of this process, if started."""
    return _runtime


def set_runtime(rt: Runtime | None) -> None:
    """Install (or clear) the runtime of this process."""
    global _runtime
    _runtime = rt
