"""Borrowed reads (ADR 0010): a thread other than the loop's reads a connection itself.

A thread blocked on a reply would otherwise be woken by the loop after the loop was woken by
the socket: two wake-ups where one does. Instead it *borrows* the connection the reply will
come on (:meth:`Borrowing.read_here`): it pauses the loop's reading of it (through the
:class:`~regency._transport._poller.Poller`), waits in ``poll`` on the socket and its
:class:`~regency._transport._poller.Waker`, reads once under the connection's read lock,
keeps the frames it was waiting for and hands the rest back to the loop, in order, and
resumes the connection.

The seam
--------
This module is the whole of the transport's side. What a layer above sees of a connection
is :class:`Borrowable` (``borrowable``, ``pause_reads``, ``resume_reads``, ``read_here``);
what it hands down is two plain callables, ``take(frame) -> bool`` (keep this frame? runs
under the read lock: it must only keep frames, never block) and ``ready() -> bool`` (is
there something to do already, so the thread must not read?), with its ``Waker``. The
runtime's side, which connection to borrow and which frames to take, is
``regency._runtime._borrow.ReadHere``.

Lingering. A borrow that ends leaves the connection paused (:meth:`Borrowing.linger`), so
that the next borrow, often a moment later, need not pause it again; the poller has the
loop resume it if none comes within ``linger`` seconds (:meth:`Borrowing.sweep`). A borrow
or ``pause`` that finds it lingering takes it over as it is.

Ordering. The read lock is taken by the loop (without blocking: if a borrower holds it, the
loop skips the event, and the borrower leaves the connection lingering when it is done) and
by a borrower. Frames handed back queue in :attr:`Borrowing.handback`, which the loop delivers
before it reads anything newer, and a borrower that finds frames still to give back takes
nothing: what it would read must come after them.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ._poller import Poller, Readable, Waker
from ._reader import End, Reader

__all__ = ["Borrowable", "Borrowing", "Take"]

#: Offered each whole frame a borrower reads, in order: True keeps it (read lock held).
Take = Callable[[Any], bool]  # gets what the reader decoded of each frame


class Borrowable(Protocol):
    """What a layer above sees of a connection it may read on its own thread."""

    @property
    def borrowable(self) -> bool:
        """Whether ``read_here`` may read it now (plain, polled, open)."""
        ...

    def pause_reads(self) -> bool:
        """Stop the loop from reading it (any thread); False when it cannot be borrowed."""
        ...

    def resume_reads(self) -> None:
        """Undo ``pause_reads``."""
        ...

    def end_linger(self) -> None:
        """Let the loop read it now if a borrow left it paused (any thread)."""
        ...

    def read_here(self, take: Take, waker: Waker, timeout: float | None,
                  ready: Callable[[], bool], paused: bool = False, spin: float = 0.0,
                  guard: AbstractContextManager[Any] | None = None) -> bool:
        """See :meth:`Borrowing.read_here`."""
        ...


class Host(Readable, Protocol):
    """What borrowing needs of its connection."""

    closed: bool
    throttled: bool
    loop_thread: int  # the ident of the loop's thread


    def to_loop(self, fn: Callable[..., None], *args: Any) -> None: ...

    def deliver(self, frame: Any) -> None: ...

    def end(self, end: End) -> None: ...


class Borrowing:
    """The read lock of one connection, and its borrowers (``poller`` None: never lent)."""

    __slots__ = ("_fd", "_host", "_loop_thread", "_reader", "_state", "borrowers", "ending",
                 "handback", "handed_back", "lingering", "listed", "lock", "poller", "since",
                 "taken")

    def __init__(self, host: Host, reader: Reader, poller: Poller | None) -> None:
        self._host = host
        self._fd = host.fileno()  # fixed for the connection's life: asked once, not per read
        self._loop_thread = host.loop_thread
        self._reader = reader
        self.poller = poller
        self.lock = threading.RLock()  # held while reading: by the loop or a borrower
        self.handback: collections.deque[Any] = collections.deque()
        self.borrowers: list[Waker] = []  # threads waiting to read it themselves
        self.ending = False  # a borrower saw it end; the loop closes it
        self.taken = 0  # frames borrowers took (statistics)
        self.handed_back = 0  # frames borrowers read and gave back to the loop (statistics)
        self._state = threading.Lock()  # guards the three below
        self.lingering = False  # paused by a borrow that ended, for the next one
        self.since = 0.0  # when it began to linger (``time.monotonic``)
        self.listed = False  # in the poller's sweep

    @property
    def borrowable(self) -> bool:
        """Whether another thread may read it itself (``read_here``)."""
        return self.poller is not None and not self._host.closed and not self.ending

    def pause(self) -> bool:
        """Stop the loop from reading the connection until ``resume`` (any thread)."""
        poller = self.poller
        if poller is None or self._host.closed:
            return False
        with self._state:
            if self.lingering:  # paused still: take it over as it is
                self.lingering = False
                return True
        return poller.pause(self._host)

    def resume(self) -> None:
        """Undo ``pause`` (a throttled connection stays paused)."""
        with self._state:
            self.lingering = False
        self._let_loop_read()

    def _let_loop_read(self) -> None:
        """Let the loop read the connection again, unless throttled (``unthrottle`` resumes
        it then) or closed."""
        host = self._host
        if self.poller is not None and not host.throttled and not host.closed:
            self.poller.resume(host)

    def linger(self) -> None:
        """A borrow ended: leave the connection paused for the next one, for ``linger``
        seconds at most (or resume it now, without lingering or when throttled)."""
        poller = self.poller
        host = self._host
        if poller is None or host.throttled:
            return  # throttled: ``unthrottle`` resumes it
        if poller.linger <= 0:
            poller.resume(host)
            return
        with self._state:
            self.lingering = True
            self.since = time.monotonic()
            if self.listed:
                return
            self.listed = True
        poller.track(self)

    def end_linger(self) -> None:
        """Give a lingering connection back to the loop now (any thread): something will
        wait for what it brings without reading it (an ``await``, a callback)."""
        with self._state:
            if not self.lingering:
                return
            self.lingering = False
        self._let_loop_read()

    def sweep(self, now: float, linger: float) -> None:
        """Resume the connection if it lingered ``linger`` seconds (the poller's sweep, on
        the loop); leave the sweep once no borrow of it ended within the last ``linger``
        seconds (a connection borrowed again and again stays listed: no re-listing, which
        wakes the loop, each time the sweep passes while it is borrowed)."""
        with self._state:
            if now - self.since < linger:
                return  # lingering for a short while, or borrowed since it lingered lately
            if self.lingering:
                self.lingering = False
                self._let_loop_read()
            self.listed = False
            if self.poller is not None:
                self.poller.untrack(self)

    def read_here(self, take: Take, waker: Waker, timeout: float | None,
                  ready: Callable[[], bool], paused: bool = False, spin: float = 0.0,
                  guard: AbstractContextManager[Any] | None = None) -> bool:
        """Wait for and read the connection on the calling thread, not the loop's.

        Whole frames go to ``take`` in arrival order while it accepts them (returns True);
        from the first it declines on, the rest go to the loop, in order, as if the loop had
        read them. Returns after one read, a ``waker.wake()`` or ``timeout`` (the caller
        loops), and without reading when ``ready()`` is true once the loop cannot read any
        more (what the loop read before must be handled first). Returns False when the
        connection cannot be borrowed (TLS, closed, ended, not polled, or called on the
        loop thread). ``paused``: the caller paused it already (``pause``); it is resumed
        either way. ``spin``: seconds to poll before sleeping (:meth:`Waker.wait`).
        ``guard``: a context entered around the read itself (e.g. deferring interrupts: a
        frame read must not be lost to an exception before it is kept).
        """
        host = self._host
        poller = self.poller
        if (poller is None or host.closed or self.ending
                or threading.get_ident() == self._loop_thread):
            if paused:
                self.resume()
            return False
        if not paused and not self.pause():
            return False
        self.borrowers.append(waker)
        end: End | None = None
        try:
            with self.lock:  # a read the loop began before the pause ends first
                if ready() or host.closed:
                    return True
                if spin <= 0 and waker.reads_first():  # busy machine: the data may be in
                    end = self._read(take, guard)
                    found = end is not None or not self._reader.empty
                    waker.read_first_found(found)
                    if found:
                        return True
            if not waker.wait(self._fd, timeout, spin):
                return True
            with self.lock:
                if host.closed or ready():  # e.g. frames handed back were delivered since:
                    return True             # what we would read must come after them
                end = self._read(take, guard)
        finally:
            self.borrowers.remove(waker)
            self.linger()  # paused for the next borrow a moment, if it comes
            if self.handback:
                host.to_loop(self._give_back_soon)
            if end is not None:
                self.ending = True  # from now on, only the loop reads it
                if end != (False, None):  # an end of stream stays readable: the loop sees it
                    host.to_loop(host.end, end)
        return True

    def _read(self, take: Take, guard: AbstractContextManager[Any] | None) -> End | None:
        """One read for a borrower (read lock held)."""
        if guard is None:
            return self._reader.read(_Taker(self, take), 1)
        with guard:
            return self._reader.read(_Taker(self, take), 1)

    def give_back(self) -> None:
        """Deliver frames handed back by a borrower (loop thread, read lock held)."""
        handback = self.handback
        host = self._host
        while handback and not host.closed:
            host.deliver(handback.popleft())

    def _give_back_soon(self) -> None:
        # a borrower holds the lock only for moments (never while it waits or runs a handler)
        with self.lock:
            self.give_back()

    def wake_all(self) -> None:
        """The connection is closing: no borrower may sit on a socket about to be closed."""
        for borrower in list(self.borrowers):
            borrower.wake()


class _Taker:
    """The sink of a borrowed read: frames to ``take`` until it declines one, then back."""

    __slots__ = ("borrowing", "declined", "take")

    def __init__(self, borrowing: Borrowing, take: Take) -> None:
        self.borrowing = borrowing
        self.take = take
        self.declined = bool(borrowing.handback)  # frames still to give back go first

    def __call__(self, frame: Any) -> None:
        if not self.declined and self.take(frame):
            self.borrowing.taken += 1
            return
        self.declined = True
        borrowing = self.borrowing
        borrowing.handed_back += 1
        borrowing.handback.append(frame)  # the loop delivers it, in order (read_here)
