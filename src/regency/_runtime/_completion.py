"""A thread-safe, write-once result cell: the core under every user-facing Future.

Completed on the loop thread (or any thread); waited on from any thread with a plain lock,
or awaited from any running asyncio loop. No task is created per call, and a timed-out wait
does not consume the result.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from .._transport._checkpoint import MAIN_ID, SLICE_S, checkpoint

_log = logging.getLogger("regency")
_PENDING: Final = object()
_FINISH: Final = threading.Lock()  # finishing is check-then-set, and so is adding a callback


class Reader(Protocol):
    """A faster way to wait than the lock: reading the reply's connection itself."""

    def read_for(self, c: Completion, timeout: float | None) -> bool:
        """Wait for ``c`` by reading (``timeout`` seconds at most); whether it is done."""

    def release(self) -> None:
        """The loop must complete ``c`` instead: let it read whatever a read left paused."""


class Pending(Protocol):
    """What a result waits for, said only when asked (a timeout): a call's collector."""

    def pending_text(self) -> str:
        """What is still pending, in words."""


class Completion:
    """Write-once cell holding a value or an exception."""

    __slots__ = ("_callbacks", "_exc", "_lock", "_value", "label", "reader", "waker")

    def __init__(self, label: str | Pending = "") -> None:
        self._lock: threading.Lock | None = None  # made by the first plain waiter (held)
        self._value: Any = _PENDING
        self._exc: BaseException | None = None
        self._callbacks: list[Callable[[Completion], None]] | None = None
        self.label = label  # what is pending, for timeout messages (see ``describe``)
        self.reader: Reader | None = None  # a faster way to wait, where there is one
        self.waker: Any = None  # woken when done: a thread waiting through ``reader``

    def describe(self) -> str:
        """What is pending, in words ("" once done, or when nobody said)."""
        label = self.label
        return label if isinstance(label, str) else label.pending_text()

    def done(self) -> bool:
        """Whether a value or an exception is set."""
        return self._value is not _PENDING

    def set_result(self, value: Any) -> bool:
        """Set the value; returns False if already done."""
        return self._finish(value, None)

    def set_exception(self, exc: BaseException) -> bool:
        """Set the exception; returns False if already done."""
        return self._finish(None, exc)

    def _finish(self, value: Any, exc: BaseException | None) -> bool:
        with _FINISH:
            if self._value is not _PENDING:
                return False
            self._exc = exc
            self._value = value
            callbacks, self._callbacks = self._callbacks, None  # none can be added from now
            lock = self._lock
        if not isinstance(self.label, str):
            self.label = ""  # a collector describes us and holds us: no cycle once done
        self.reader = None
        if lock is not None:
            lock.release()
        waker = self.waker
        if waker is not None:
            waker.wake()
        for cb in callbacks or ():
            try:
                cb(self)
            except Exception:  # one broken callback must not cost the others, or the
                _log.exception("regency: error in a completion callback")  # completer
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until done (or ``timeout`` seconds); returns whether it is done."""
        if self._value is not _PENDING:
            return True
        reader = self.reader
        if reader is not None:
            return reader.read_for(self, timeout)
        return self.wait_plain(timeout)

    def wait_plain(self, timeout: float | None = None) -> bool:
        """``wait`` on the lock only (the loop thread completes us)."""
        lock = self._lock
        if lock is None:  # most calls are done, or read by their waiter, without one
            with _FINISH:  # made and taken here, or seen by ``_finish``: no lost wake-up
                if self._value is not _PENDING:
                    return True
                lock = self._lock
                if lock is None:
                    lock = self._lock = threading.Lock()
                    lock.acquire()
        ok = _acquire(lock, timeout)
        if ok:
            lock.release()
        return ok

    def outcome(self) -> Any:
        """The value, or raise the exception (only when done)."""
        if self._exc is not None:
            raise self._exc
        return self._value

    def exception(self) -> BaseException | None:
        """The exception, if any (only when done)."""
        return self._exc

    def add_done_callback(self, cb: Callable[[Completion], None]) -> None:
        """Call ``cb(self)`` when done (at once if already done), on the finishing thread.

        Exactly once, whichever threads add callbacks and finish at the same time: adding
        and finishing take the same lock, so a callback is either in the list that the
        finishing thread takes or sees the cell done and runs at once.
        """
        if self._value is _PENDING:
            with _FINISH:
                if self._value is _PENDING:
                    if self._callbacks is None:
                        self._callbacks = [cb]
                    else:
                        self._callbacks.append(cb)
                    pending = True
                else:
                    pending = False
            if pending:
                self._loop_reads()
                return
        cb(self)

    def _loop_reads(self) -> None:
        """The loop completes us now (a callback, an ``await``): a connection a borrowed read
        left paused (the reader's ``release()``) must not keep the result waiting."""
        reader = self.reader
        if reader is not None:
            reader.release()

    def as_asyncio(self) -> asyncio.Future[Any]:
        """An asyncio future on the running loop that completes with this cell."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        owner = threading.get_ident()

        def copy(_: Completion) -> None:
            if threading.get_ident() == owner:
                _transfer(self, fut)
            elif not loop.is_closed():  # closed: no one awaits it any more (asyncio.run ended)
                try:
                    loop.call_soon_threadsafe(_transfer, self, fut)
                except RuntimeError:  # closed between the test and the call
                    pass

        self.add_done_callback(copy)
        return fut


def _acquire(lock: threading.Lock, timeout: float | None) -> bool:
    """``lock.acquire`` with a timeout. On the main thread, in slices with a
    ``checkpoint()`` before each: a Ctrl-C that came while compiled code ran just before
    ends the wait within a slice, not at its end."""
    if threading.get_ident() != MAIN_ID:
        return lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0))
    deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    while True:
        checkpoint()
        left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
        if lock.acquire(timeout=max(left, 0.0)):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


def _transfer(src: Completion, dst: asyncio.Future[Any]) -> None:
    if dst.done():
        return
    exc = src.exception()
    if exc is not None:
        dst.set_exception(exc)
    else:
        dst.set_result(src._value)
