"""Read readiness of many connections through one inner ``epoll``, so a thread can borrow one.

Theory of operation
-------------------
A thread blocked on a reply (a caller in ``Future.get``, an idle sync actor) would otherwise
be woken by the loop thread after the loop thread itself was woken by the socket: two wake-ups
where one would do, and on small machines each costs tens of microseconds. Instead, such a
thread *borrows* the connection the reply will come on: it pauses the connection here, reads
it itself, and resumes it. The loop keeps reading every other connection meanwhile.

The loop watches one ``epoll`` object holding the sockets (``loop.add_reader`` on its file
descriptor). Pausing and resuming a socket are ``epoll_ctl`` calls, which the kernel makes
safe from any thread; the event loop's own registrations may only change on the loop thread.
Registrations are level-triggered, so bytes that arrive while a socket is paused are seen as
soon as it is resumed.

*Lingering.* A thread that waits on reply after reply (a loop of ``.get()``, a busy sync
actor) would pause and resume the same socket around every read. Instead, a borrow that
ends leaves the socket paused for the next one (it *lingers*), and :meth:`Poller.track`
has the loop resume it once it has lingered ``linger`` seconds with no borrow taking it
(:meth:`Poller._sweep`, a timer that runs only while something lingers or a borrow of it
ended within the last ``linger`` seconds). Whatever arrives
meanwhile for the loop waits at most about twice ``linger`` (config ``borrow_linger``).

:class:`Waker` is what a borrowing thread polls besides the socket: anything else that should
end its wait (another message queued for it, its result set by the loop, the connection
closing) writes to it.
"""

from __future__ import annotations

import asyncio
import os
import select
import threading
import time
from collections.abc import Callable
from typing import Final, Protocol

from ._checkpoint import MAIN_ID, SLICE_S, checkpoint

__all__ = ["Poller", "Waker"]

_EVENTS: Final = select.EPOLLIN
_BATCH: Final = 64


class Readable(Protocol):
    """What the poller drives: a connection with a socket to read on the loop."""

    def fileno(self) -> int: ...

    def _on_readable(self) -> None: ...


class Lingering(Protocol):
    """What the poller's sweep asks of a connection's borrowing that lingers."""

    def sweep(self, now: float, linger: float) -> None:
        """Resume it if it lingered ``linger`` seconds; ``untrack`` it once no borrow of it
        ended within the last ``linger`` seconds."""
        ...


class Poller:
    """One inner ``epoll`` of a loop's connections (loop thread, except pause/resume and
    ``track``). ``linger``: seconds a socket a borrow just read stays paused for the next
    borrow (0: resumed at once)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, linger: float = 0.0) -> None:
        self.loop = loop
        self.linger = linger
        self._epoll = select.epoll()
        self._conns: dict[int, Readable] = {}
        self._closed = False
        self._lingering: set[Lingering] = set()  # borrowings left paused, to sweep
        self._sweep_lock = threading.Lock()  # guards ``_lingering`` and ``_sweeping``
        self._sweeping = False  # the sweep timer is set (or about to be)
        loop.add_reader(self._epoll.fileno(), self._ready)

    def add(self, conn: Readable) -> None:
        """Watch ``conn`` (loop thread)."""
        fd = conn.fileno()
        self._conns[fd] = conn
        try:
            self._epoll.register(fd, _EVENTS)
        except FileExistsError:  # a closed socket's number, reused before it was removed
            self._epoll.modify(fd, _EVENTS)

    def remove(self, conn: Readable) -> None:
        """Stop watching ``conn`` (before its socket is closed)."""
        fd = conn.fileno()
        if self._conns.get(fd) is conn:
            del self._conns[fd]
            try:
                self._epoll.unregister(fd)
            except (OSError, ValueError):
                pass

    def pause(self, conn: Readable) -> bool:
        """Stop the loop from reading ``conn`` (any thread); False if it is not watched."""
        fd = conn.fileno()
        if self._conns.get(fd) is not conn:
            return False
        try:
            self._epoll.modify(fd, 0)
        except (OSError, ValueError):
            return False
        return True

    def resume(self, conn: Readable) -> None:
        """Let the loop read ``conn`` again (any thread)."""
        fd = conn.fileno()
        if self._conns.get(fd) is conn:
            try:
                self._epoll.modify(fd, _EVENTS)
            except (OSError, ValueError):
                pass  # closed meanwhile: nothing left to read

    def track(self, item: Lingering) -> None:
        """Sweep ``item`` until it is left alone (its ``sweep`` says when; any thread)."""
        with self._sweep_lock:
            self._lingering.add(item)
            if self._sweeping or self._closed:
                return
            self._sweeping = True
        try:
            self.loop.call_soon_threadsafe(self._sweep_later)
        except RuntimeError:  # the loop is closed: nothing reads any more anyway
            pass

    def untrack(self, item: Lingering) -> None:
        """Stop sweeping ``item`` (its ``sweep``, under its own lock)."""
        with self._sweep_lock:
            self._lingering.discard(item)

    def _sweep_later(self) -> None:
        self.loop.call_later(self.linger, self._sweep)

    def _sweep(self) -> None:
        """Resume what lingered long enough (loop thread); again later while any lingers."""
        now = time.monotonic()
        with self._sweep_lock:
            items = list(self._lingering)
        for item in items:
            item.sweep(now, self.linger)
        with self._sweep_lock:
            if self._lingering and not self._closed:
                self.loop.call_later(self.linger, self._sweep)
            else:
                self._sweeping = False

    def close(self) -> None:
        """Stop watching everything (loop thread)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.loop.remove_reader(self._epoll.fileno())
        except Exception:
            pass
        self._conns.clear()
        self._epoll.close()

    def _ready(self) -> None:
        try:
            events = self._epoll.poll(0, _BATCH)
        except (OSError, ValueError):
            return
        conns = self._conns
        for fd, _ in events:
            conn = conns.get(fd)
            if conn is not None:
                conn._on_readable()


def _spin(poll: Callable[[int], list[tuple[int, int]]], seconds: float
          ) -> list[tuple[int, int]]:
    """Poll without sleeping for up to ``seconds`` (each poll lets other threads run)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        events = poll(0)
        if events:
            return events
    return []


def _millis(timeout: float | None, start: float) -> int | None:
    """What is left of ``timeout`` (seconds, from ``start``), in ``poll``'s milliseconds."""
    if timeout is None:
        return None
    return int(max(0.0, timeout - (time.perf_counter() - start)) * 1000 + 0.999)


_MAX_SKIP: Final = 31  # the most waits a thread polls at once before it tries to read first again
MAIN_SLICE_MS: Final = int(SLICE_S * 1000)  # the main thread's sleeps, in poll's milliseconds


class Waker:
    """An ``eventfd`` a borrowing thread polls: ``wake()`` ends its wait (any thread)."""

    __slots__ = ("_backoff", "_poll", "_quick", "_skip", "_watched", "armed", "fd")

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.armed = False  # a thread is (about to be) waiting on it
        self._poll = select.poll()
        self._poll.register(self.fd, select.POLLIN)
        self._watched = -1
        self._quick = True  # the last wait ended within the spin: spin again
        self._skip = 0  # waits left before the next read-first attempt (``reads_first``)
        self._backoff = 0  # ``_skip`` after the next miss; doubles with each miss in a row

    def wake(self) -> None:
        """End the current (or next) wait."""
        try:
            os.eventfd_write(self.fd, 1)
        except OSError:
            pass

    def reads_first(self) -> bool:
        """Whether a thread about to sleep should first just read (a busy machine).

        When no core is idle, the peer often answers while the waiting thread is still off
        its core, so a read without polling first finds the data and saves a ``poll``.
        Adaptive: after a read that found nothing, the next 1, 3, 7 ... 31 waits poll at
        once (a thread whose data never comes that fast soon stops trying); a read that
        found data ends the back-off.
        """
        if self._skip:
            self._skip -= 1
            return False
        return True

    def read_first_found(self, found: bool) -> None:
        """Record what a read-first attempt found (``reads_first``)."""
        if found:
            self._backoff = 0
        else:
            self._backoff = min(self._backoff * 2 + 1, _MAX_SKIP)
            self._skip = self._backoff

    def wait(self, fd: int, timeout: float | None, spin: float = 0.0) -> bool:
        """Wait until ``fd`` is readable (True) or a wake or the timeout (False).

        For the first ``spin`` seconds it polls without sleeping: on virtual machines,
        waking a sleeping thread costs tens of microseconds, more than a quick reply takes.
        Adaptive: it spins only while the previous wait that was allowed to spin ended
        within ``spin`` (a thread whose replies are slow soon sleeps at once); a wait with
        no spin (a busy machine) sleeps at once and does not count.
        """
        if fd != self._watched:
            if self._watched >= 0:
                self._poll.unregister(self._watched)
            self._poll.register(fd, select.POLLIN)
            self._watched = fd
        poll = self._poll.poll
        if spin > 0 and self._quick:
            start = time.perf_counter()
            events = _spin(poll, spin if timeout is None else min(spin, timeout))
            if not events:
                events = self._sleep(poll, timeout, start)
            self._quick = time.perf_counter() - start <= spin
        elif spin > 0:  # not spinning this time: sleep at once, and see whether to next time
            start = time.perf_counter()
            events = self._sleep(poll, timeout, start)
            self._quick = time.perf_counter() - start <= spin
        else:  # no spin (a busy machine): one system call, which returns at once if ready
            events = self._sleep(poll, timeout, time.perf_counter())
        readable = False
        for got, _ in events:
            if got == self.fd:
                try:
                    os.eventfd_read(self.fd)
                except OSError:
                    pass
            else:
                readable = True
        return readable

    def _sleep(self, poll: Callable[[int | None], list[tuple[int, int]]],
                timeout: float | None, start: float) -> list[tuple[int, int]]:
        """Poll until an event or the end of ``timeout`` (seconds from ``start``). The main
        thread polls in slices and lets pending signal handlers run before each (see
        :mod:`regency._transport._checkpoint`): Ctrl-C ends its wait within a slice."""
        if threading.get_ident() != MAIN_ID:  # (a cell's waker is made on another thread)
            return poll(_millis(timeout, start))
        while True:
            checkpoint()
            left = _millis(timeout, start)
            if left is not None and left <= MAIN_SLICE_MS:
                return poll(left)
            events = poll(MAIN_SLICE_MS)
            if events:
                return events

    def close(self) -> None:
        """Give the descriptor back."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()
