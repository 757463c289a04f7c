"""Waiting by reading: a thread blocked on a reply reads the reply's connection itself.

The loop thread would otherwise read the reply and then wake the blocked thread: two thread
wake-ups per round trip where one does (see :mod:`regency._transport._poller`). The blocked
thread pauses the connection the reply will arrive on, reads it, runs the reply's port
handler itself, and resumes the connection. Every other frame it happens to read goes back
to the loop, in order. When the reply comes another way (another connection, or a failure
found by supervision), the loop completes the result and wakes the thread as before.

The seam
--------
:class:`ReadHere` is the one place the runtime and the layers above meet borrowed reads
(the transport's side is :mod:`regency._transport._borrowing`). It answers three questions,
and nothing else reaches across for them:

* *Which connection may this thread read?* ``source`` is the connection of the frame the
  loop is handling now (set by the router around each frame; an actor's mailbox remembers
  it to read while idle, and flow control throttles it); :meth:`ReadHere.came_from` is the
  connection frames from a peer last arrived on (where a caller waits for its reply).
* *Which replies may it take there?* Those to its own port, and to ports opened with
  ``Runtime.open_port(..., any_thread=True)``: the layer that opens a port says so
  explicitly (:meth:`ReadHere.allow`), instead of being asked about its objects.
* *How long may it spin before sleeping?* :meth:`ReadHere.spin_now`: ``borrow_spin`` while
  the machine has a core to spare, nothing while it has not (see below).

Spinning under load
-------------------
Spinning for a reply (ADR 0010) wins only while a core is idle: on a machine with more
runnable threads than cores, the spinner takes the core the peer needs to answer, and the
scheduler counts the spin against it, so it loses its turn when the reply comes. So the
spin is dropped while the system's count of runnable threads (``/proc/loadavg``'s fourth
field, the instantaneous count, not the slow load average) exceeds the cores plus the round
trip's own two threads (the one waiting and the one answering). Reading it
costs about 10 us, so it is sampled at most every ``_LOOK_EVERY_S`` per process, and the
decision follows the mean of the last few samples (one busy instant is not a busy machine).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final

from .._transport._borrowing import Borrowable
from .._transport._checkpoint import MAIN_ID
from .._transport._poller import Waker
from .._wire import Inbound
from .._wire._messages import Reply

if TYPE_CHECKING:
    from ._completion import Completion
    from ._runtime import Runtime

__all__ = ["Deferral", "ReadHere", "ReplyReader", "defer_interrupts", "thread_waker"]

_local: Final = threading.local()
_READING: Final = threading.Lock()  # guards ``ReplyReader.reading`` (a lock per call cost more)
_NOTHING: Final[list[Any]] = []  # a reader's ``taken`` while no thread reads for it: stays empty
_LOOK_EVERY_S: Final = 0.05  # how often the spin looks at the machine's runnable count
_SAMPLES: Final = 4  # it follows the mean of this many looks
_OWN: Final = 2  # runnable threads a round trip brings itself: the waiting one, the answering one


def thread_waker() -> Waker:
    """This thread's waker (made on first use; its descriptor closes with the thread)."""
    waker: Waker | None = getattr(_local, "waker", None)
    if waker is None:
        waker = _local.waker = Waker()
    return waker


class Deferral:
    """``with defer_interrupts:`` a SIGINT (Ctrl-C, fail fast) or a SIGTERM waits for the end
    of the block.

    For the few lines where the main thread reads frames off a socket itself (a blocked
    ``get()``, :class:`ReplyReader`): an exception there would lose a frame it had read but
    not yet kept. Blocking in ``poll`` is outside such a block: an interrupt still ends a
    wait at once. Only the main thread (where signal handlers run) defers; the handlers
    (``_api/_failfast``, ``_api/_terminate``) look at ``depth`` and leave ``pending``.
    Compiled with the reply path: it is entered twice per call a thread reads for.
    """

    __slots__ = ("depth", "pending")

    def __init__(self) -> None:
        self.depth = 0  # changed by the main thread only
        self.pending = 0  # the signal to raise again at the end of the block (0: none)

    def __enter__(self) -> None:
        if threading.get_ident() == MAIN_ID:
            self.depth += 1

    def __exit__(self, *exc: object) -> None:
        if threading.get_ident() != MAIN_ID:
            return
        self.depth -= 1
        if not self.depth and self.pending:
            sig, self.pending = self.pending, 0
            signal.raise_signal(sig)  # its handler runs now, before this returns


defer_interrupts: Final = Deferral()


class ReadHere:
    """What borrowed reads need of the runtime, in one place (see the module's docstring).

    The router owns it and keeps ``source`` and the per-peer connections current (loop
    thread); ``Runtime.open_port``/``close_port`` keep the set of ports whose replies any
    thread may handle; readers (:class:`ReplyReader`, an idle actor's mailbox) only ask.
    """

    __slots__ = (
        "_allowed",
        "_any_thread",
        "_busy",
        "_next_look",
        "_samples",
        "busy_too",
        "enabled",
        "inbound",
        "source",
        "spin",
    )

    def __init__(self) -> None:
        self.enabled = False  # a poller reads the plain connections: they may be borrowed
        self.spin = 0.0  # seconds a borrowing thread polls before sleeping (``borrow_spin``)
        self.busy_too = False  # spin even when no core is idle (``borrow_spin_busy``)
        self.source: Borrowable | None = None  # the connection of the frame being handled
        self.inbound: dict[str, Borrowable] = {}  # per peer: where its frames last came in
        self._any_thread: set[int] = set()
        # a machine is busy when more threads are runnable than its cores plus the round
        # trip's own two: those are runnable by design, even on an idle machine
        self._allowed = (os.cpu_count() or 1) + _OWN
        self._samples: list[int] = []
        self._next_look = 0.0
        self._busy = False

    def busy(self) -> bool:
        """Whether the machine has more runnable threads than cores (plus the round trip's
        own two) now (sampled at most
        every ``_LOOK_EVERY_S``; any thread). Never, with ``busy_too`` set."""
        if self.busy_too:
            return False
        now = time.monotonic()
        if now >= self._next_look:
            self._next_look = now + _LOOK_EVERY_S
            self._busy = self.look()
        return self._busy

    def spin_now(self) -> float:
        """Seconds a borrowing thread may spin now: ``spin``, or 0 while the machine is busy."""
        spin = self.spin
        return 0.0 if not spin or self.busy() else spin

    def look(self) -> bool:
        """Sample the machine's runnable count; whether it is busy (recent mean above the
        cores plus the round trip's own threads). A machine that does not tell is never
        busy."""
        samples = self._samples
        samples.append(runnable())
        if len(samples) > _SAMPLES:
            del samples[0]
        return sum(samples) > self._allowed * len(samples)

    def came_from(self, addr: str) -> Borrowable | None:
        """The open connection on which frames from ``addr`` last arrived, if any."""
        conn = self.inbound.get(addr)
        return conn if conn is not None and conn.borrowable else None

    def closed(self, addr: str, conn: Borrowable) -> None:
        """``conn``, a connection with ``addr``, closed (loop thread)."""
        if self.inbound.get(addr) is conn:
            del self.inbound[addr]

    def allow(self, port_id: int) -> None:
        """Replies to ``port_id`` may be handled on whichever thread reads them."""
        self._any_thread.add(port_id)

    def forget(self, port_id: int) -> None:
        """``port_id`` is closed."""
        self._any_thread.discard(port_id)

    def any_thread(self, port_id: int) -> bool:
        """Whether a thread that reads a reply to ``port_id`` may handle it itself."""
        return port_id in self._any_thread


def runnable() -> int:
    """Runnable threads on the machine now, the caller included (0 if unknown)."""
    try:
        fd = os.open("/proc/loadavg", os.O_RDONLY)
        try:
            data = os.read(fd, 128)
        finally:
            os.close(fd)
        return int(data.split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return 0


class ReplyReader:
    """``Completion.reader`` of a call whose replies all come from one address.

    A call's collector extends it: it is the call's reply port (its ``__call__`` handles a
    reply) and its own completion's reader, so waiting by reading costs no object per call
    (the objects of calls in flight are what the garbage collector looks at, again and
    again, in a burst of calls).
    """

    def __init__(self, rt: Runtime, port_id: int, reply_from: str = "",
                 guard: AbstractContextManager[Any] | None = None) -> None:
        self.rt = rt
        self.port_id = port_id
        self.reply_from = reply_from  # the address every reply comes from ("": several)
        self.guard = guard  # entered while frames are read and handled (see read_here)
        self.taken: list[Inbound] = _NOTHING  # while a thread reads: what it took
        self.reading = False  # one thread reads for a call; others wait plainly (_READING)

    def __call__(self, reply: Reply, frame: list[memoryview]) -> None:
        """Handle one reply to the port (on whichever thread read it): the subclass's.

        Defined here too, since mypyc lays out the attributes of a class with ``__call__``
        after a slot of its own: a compiled base must have it when its subclass does."""
        raise NotImplementedError

    def read_for(self, c: Completion, timeout: float | None) -> bool:
        """Wait for ``c`` by reading its replies' connection here (``timeout`` seconds at
        most); whether it is done. Waits on its lock when it cannot read."""
        rt = self.rt
        here = rt.read_here
        conn = here.came_from(self.reply_from)
        if (conn is None or threading.get_ident() == rt.loop_thread_id
                or not self._start_reading()):
            return c.wait_plain(timeout)
        self.taken = []
        waker = thread_waker()
        deadline = None if timeout is None else time.monotonic() + timeout
        c.waker = waker
        try:
            while not c.done():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                if not conn.read_here(self._take_reply, waker, left, c.done,
                                      spin=here.spin_now(), guard=self.guard):
                    return c.wait_plain(left)
                if self.taken:
                    # the handlers run here: finishing ``c`` need not wake this very thread
                    # (a stale wake would end its next wait at once, for nothing)
                    c.waker = None
                    self._handle()
                    c.waker = waker
        finally:
            c.waker = None
            try:
                self._handle()
            finally:
                self.taken = _NOTHING
                self.reading = False
        return True

    def _start_reading(self) -> bool:
        """Whether this thread is the one to read for the call (no other reads for it)."""
        with _READING:
            if self.reading:
                return False
            self.reading = True
            return True

    def release(self) -> None:
        """The result will be waited for without reading (awaited, or a callback): if a
        borrow left the connection paused, let the loop read it now."""
        conn = self.rt.read_here.came_from(self.reply_from)
        if conn is not None:
            conn.end_linger()

    def _take_reply(self, inbound: Inbound) -> bool:
        """Replies to this call, and to other calls whose collectors may run on any thread
        (pipelined calls answered on this connection: no trip through the loop for them)."""
        reply, _frame = inbound
        if type(reply) is not Reply:
            return False
        port_id = reply.port_id
        if port_id != self.port_id and not self.rt.read_here.any_thread(port_id):
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
