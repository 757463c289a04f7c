"""Waiting by reading: a thread blocked on a reply reads the reply's connection itself.

The loop thread would otherwise read the reply and then wake the blocked thread: two thread
wake-ups per round trip where one does (see :mod:`regency._transport._poller`). The blocked
thread pauses the connection the reply will arrive on, reads it, runs the reply's port
handler itself, and resumes the connection. Every other frame it happens to read goes back
to the loop, in order. When the reply comes another way (another connection, or a failure
found by supervision), the loop completes the result and wakes the thread as before.
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from .._transport._poller import Waker
from .._wire import Inbound
from .._wire._messages import Reply

if TYPE_CHECKING:
    from ._completion import Completion
    from ._runtime import Runtime

__all__ = ["ReplyReader", "thread_waker"]

_local = threading.local()


def thread_waker() -> Waker:
    """This thread's waker (made on first use; its descriptor closes with the thread)."""
    waker: Waker | None = getattr(_local, "waker", None)
    if waker is None:
        waker = _local.waker = Waker()
    return waker


class ReplyReader:
    """``Completion.reader`` of a call whose replies all come from one address."""

    __slots__ = ("addr", "guard", "port_id", "reading", "rt", "taken")

    def __init__(self, rt: Runtime, addr: str, port_id: int,
                 guard: AbstractContextManager[Any] | None = None) -> None:
        self.rt = rt
        self.addr = addr
        self.port_id = port_id
        self.guard = guard  # entered while frames are read and handled (see read_here)
        self.taken: list[Inbound] = []
        self.reading = threading.Lock()  # one thread reads for a call; others wait plainly

    def __call__(self, c: Completion, timeout: float | None) -> bool:
        rt = self.rt
        conn = rt.router.inbound(self.addr)
        if conn is None or rt.on_loop() or not self.reading.acquire(False):
            return c.wait_plain(timeout)
        waker = thread_waker()
        deadline = None if timeout is None else time.monotonic() + timeout
        c.waker = waker
        try:
            while not c.done():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                if not conn.read_here(self._take, waker, left, c.done, spin=rt.router.spin,
                                      guard=self.guard):
                    return c.wait_plain(left)
                self._handle()
        finally:
            c.waker = None
            try:
                self._handle()
            finally:
                self.reading.release()
        return True

    def _take(self, inbound: Inbound) -> bool:
        """Replies to this call, and to other calls whose collectors may run on any thread
        (pipelined calls answered on this connection: no trip through the loop for them)."""
        reply, _frame = inbound
        if type(reply) is not Reply:
            return False
        port_id = reply.port_id
        if port_id != self.port_id and not getattr(self.rt.collectors.get(port_id),
                                                   "any_thread", False):
            return False
        self.taken.append(inbound)
        return True

    def _handle(self) -> None:
        """Run the port's handler on what was taken, once the connection is the loop's again
        (unpickling a reply may itself wait on that connection)."""
        taken = self.taken
        if not taken:
            return
        if self.guard is None:
            self._run_handlers(taken)
        else:
            with self.guard:
                self._run_handlers(taken)

    def _run_handlers(self, taken: list[Inbound]) -> None:
        while taken:
            reply, frame = taken.pop(0)
            assert isinstance(reply, Reply)  # only replies are taken
            handler = self.rt.ports.get(reply.port_id)
            if handler is not None:
                handler(reply, frame)
