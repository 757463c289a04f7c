"""Hooks in front of an actor's mailbox, for tools such as fault injection (``regency.testing``).

The dispatch path has no branch for them. A hook is installed by putting an ``Intercepted``
cell in front of the actor's cell in ``Runtime.cells``, which the runtime looks up for every
call anyway: while no hook is installed, no code of this module runs. A sync actor that reads
its own connection (ADR 0010) declines calls while its cell is not the registered one, so
every call passes the hooks, on the loop thread. Removing the last hook puts the actor's own
cell back. Everything here runs on the loop thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._runtime._runtime import Runtime
from .._wire._messages import Call

__all__ = ["CallHook", "Intercepted", "intercept", "release"]

#: ``hook(call, frame, cell)``: whether the hook took the call (else it goes to ``cell``).
CallHook = Callable[[Call, list[memoryview], Any], bool]


class Intercepted:
    """An actor's cell with hooks, by endpoint, in front of its mailbox."""

    def __init__(self, cell: Any) -> None:
        self.cell = cell
        self.hooks: dict[str, CallHook] = {}

    def enqueue(self, call: Call, frame: list[memoryview]) -> None:
        """Offer the call to its endpoint's hook; what the hook leaves goes to the mailbox."""
        hook = self.hooks.get(call.endpoint)
        if hook is None or not hook(call, frame, self.cell):
            self.cell.enqueue(call, frame)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cell, name)  # behavior, control, close, backlog: the actor's


def intercept(rt: Runtime, uid: str, endpoint: str, hook: CallHook) -> bool:
    """Put ``hook`` in front of the calls of ``endpoint`` to the actor ``uid`` in ``rt``.

    Returns False when no live actor ``uid`` is here (nothing is installed then).
    """
    cell = rt.cells.get(uid)
    if not isinstance(cell, Intercepted):
        if getattr(cell, "behavior", None) is None:
            return False
        cell = rt.cells[uid] = Intercepted(cell)
    cell.hooks[endpoint] = hook
    return True


def release(rt: Runtime, uid: str, endpoint: str) -> None:
    """Remove the hook of ``endpoint``; the last one gone, the actor's own cell is back."""
    cell = rt.cells.get(uid)
    if isinstance(cell, Intercepted):
        cell.hooks.pop(endpoint, None)
        if not cell.hooks:
            rt.cells[uid] = cell.cell
