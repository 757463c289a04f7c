"""Keeping a proc's event loop awake for a moment after it handled a frame (ADR 0037).

An async actor runs on its proc's event loop, and that loop sleeps in ``epoll`` as soon as it
has nothing to do: the answer to a call goes out, and the next call, which the caller sends
as soon as it has the answer, finds the loop asleep and waits for it to be woken (on a
virtual machine, 15 to 30 us: as long as the rest of the round trip). A thread blocked on a
reply polls before it sleeps for the same reason (``borrow_spin``, ADR 0010); this is the
loop's counterpart. After the loop handles a frame it keeps one callback scheduled, so that
it polls its sockets without sleeping, for ``loop_spin`` seconds after the last frame;
never while the machine is busy (more runnable threads than cores, as
:meth:`~regency._runtime._borrow.ReadHere.busy` samples it), where the spin would take a core
from work.
"""

from __future__ import annotations

import asyncio
import time

from ._borrow import ReadHere

__all__ = ["LoopSpin"]


class LoopSpin:
    """Polls instead of sleeping for ``spin`` seconds after the last ``kick`` (loop thread)."""

    __slots__ = ("_kicked", "_loop", "_on", "_read_here", "_spin", "_until")

    def __init__(self, loop: asyncio.AbstractEventLoop, read_here: ReadHere,
                 spin: float) -> None:
        self._loop = loop
        self._read_here = read_here
        self._spin = spin
        self._until = 0.0
        self._kicked = False  # a frame was handled since the last tick
        self._on = False  # a tick is scheduled

    def kick(self) -> None:
        """A frame was handled: poll for ``spin`` seconds from the next tick on (cheap: a
        burst of frames costs one flag each)."""
        self._kicked = True
        if not self._on:
            self._on = True
            self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        if self._kicked:
            self._kicked = False
            self._until = now + (0.0 if self._read_here.busy() else self._spin)
        if now < self._until:
            self._loop.call_soon(self._tick)  # a ready callback: the loop polls, not sleeps
        else:
            self._on = False
