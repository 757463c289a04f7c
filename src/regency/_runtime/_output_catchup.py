"""The controller lets a result be seen once the lines its worker proc printed first are.

A worker's proc sends an ``output_mark`` (the bytes it had written to its stdout and stderr
pipes) just before a reply or system message to the controller, on the same connection, so
the mark is handled first; the worker's agent stamps each ``proc_output`` with the bytes it
has read from that pipe (:mod:`._output_marks`, ADR 0039). :data:`book` keeps, per proc, the
highest mark not yet met. ``Future.get`` and ``await`` call :meth:`CatchUp.wait` before they
hand a result over, when :attr:`CatchUp.behind` says some proc is behind: it returns once
the stamps have reached every mark then known, or after :data:`TIMEOUT_S` (a mark that
never comes true, its lines lost with their agent say, is then given up; after
:data:`GIVE_UP` of them, that proc's marks are ignored). The root's failure reports wait
on the loop's thread with :meth:`CatchUp.caught_up` (``Supervisor._after_lines``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time

__all__ = ["GIVE_UP", "TIMEOUT_S", "CatchUp", "book"]

log = logging.getLogger("regency.output")

#: What an ended proc counts as having forwarded: more than any mark of it says.
ENDED = sys.maxsize

#: Seconds a result waits for its proc's lines before it is shown without them.
TIMEOUT_S = 1.0
#: Marks of one proc given up on before its later marks are ignored: its bytes do not reach
#: the pipe its agent reads (fd 1 sent elsewhere, say), and each result would wait.
GIVE_UP = 3


class _Waiter:
    """An ``await`` waiting for the marks it saw (``Future.__await__``)."""

    __slots__ = ("fut", "loop", "marks")

    def __init__(self, marks: dict[str, list[int]], loop: asyncio.AbstractEventLoop) -> None:
        self.marks = marks
        self.loop = loop
        self.fut: asyncio.Future[None] = loop.create_future()


class CatchUp:
    """Marks not yet met, per proc: ``{proc: [stdout bytes, stderr bytes]}``."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._wanted: dict[str, list[int]] = {}
        self._read: dict[str, list[int]] = {}
        self._late: dict[str, int] = {}  # marks of a proc given up on (its lines never came)
        self._waiters: list[_Waiter] = []
        self.behind = 0  # procs with a mark not met: read without the lock, to skip wait()
        self._meeter = 0  # the thread that handles marks and stamps (the runtime's loop)

    def want(self, proc: str, stdout: int, stderr: int) -> None:
        """A mark came from ``proc`` (loop thread)."""
        self._meeter = threading.get_ident()
        with self._changed:
            read = self._read.get(proc, [0, 0])
            if (read[0] >= stdout and read[1] >= stderr) or self._late.get(proc, 0) >= GIVE_UP:
                return
            wanted = self._wanted.setdefault(proc, [0, 0])
            wanted[0] = max(wanted[0], stdout)
            wanted[1] = max(wanted[1], stderr)
            self.behind = len(self._wanted)

    def read(self, proc: str, index: int, count: int) -> None:
        """``proc``'s agent had read ``count`` bytes of stream ``index`` (0: stdout, 1:
        stderr) when it sent lines that are now written (loop thread)."""
        with self._changed:
            read = self._read.setdefault(proc, [0, 0])
            read[index] = max(read[index], count)
            wanted = self._wanted.get(proc)
            if wanted is None:
                return
            if read[0] >= wanted[0] and read[1] >= wanted[1]:
                del self._wanted[proc]
                self.behind = len(self._wanted)
            self._wake()  # a waiter may need less than the latest mark

    def forget(self, proc: str) -> None:
        """``proc`` is gone (or its agent): nothing more of it will be read, and a mark of
        it that still comes (passed on by a proc it answered) is met (loop thread)."""
        with self._changed:
            self._read[proc] = [ENDED, ENDED]
            self._late.pop(proc, None)
            if self._wanted.pop(proc, None) is not None:
                self.behind = len(self._wanted)
                self._wake()

    def forget_procs_of(self, agent: str) -> None:
        """The host agent at ``agent`` is gone: forget the procs named after it (loop
        thread)."""
        prefix = f"via:{agent}/"
        with self._changed:
            procs = [p for p in {*self._wanted, *self._read} if p.startswith(prefix)]
        for proc in procs:
            self.forget(proc)

    def wait(self, timeout: float = TIMEOUT_S) -> None:
        """Return once every mark known now is met, or after ``timeout`` seconds (then
        those marks are given up). At once on the loop's thread, which meets them."""
        if threading.get_ident() == self._meeter:
            return
        deadline = time.monotonic() + timeout
        with self._changed:
            marks = {proc: list(wanted) for proc, wanted in self._wanted.items()}
            while True:
                late = self._late_of(marks)
                left = deadline - time.monotonic()
                if not late:
                    return
                if left <= 0:
                    break
                self._changed.wait(left)
            self._give_up(marks, late)

    async def caught_up(self, timeout: float = TIMEOUT_S) -> None:
        """:meth:`wait` for an ``await``: the running loop goes on meanwhile (no thread)."""
        with self._changed:
            marks = {proc: list(wanted) for proc, wanted in self._wanted.items()}
            if not self._late_of(marks):
                return
            waiter = _Waiter(marks, asyncio.get_running_loop())
            self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter.fut, timeout)
        except (TimeoutError, asyncio.TimeoutError):
            with self._changed:
                self._give_up(marks, self._late_of(marks))
        finally:
            with self._changed:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def _late_of(self, marks: dict[str, list[int]]) -> list[str]:
        return [proc for proc, mark in marks.items() if not self._met(proc, mark)]

    def _met(self, proc: str, mark: list[int]) -> bool:
        read = self._read.get(proc)
        if read is not None and read[0] >= mark[0] and read[1] >= mark[1]:
            return True
        return proc not in self._wanted  # forgotten (the proc ended) or given up

    def _wake(self) -> None:
        """Something was met (lock held): wake the threads, settle the awaits that wait
        for nothing more."""
        self._changed.notify_all()
        for waiter in [w for w in self._waiters if not self._late_of(w.marks)]:
            self._waiters.remove(waiter)
            waiter.loop.call_soon_threadsafe(_settle, waiter.fut)

    def _give_up(self, marks: dict[str, list[int]], late: list[str]) -> None:
        """Forget the marks of ``late`` a waiter waited for in vain (lock held)."""
        for proc in late:
            if self._wanted.get(proc) == marks[proc]:
                del self._wanted[proc]
                self._late[proc] = self._late.get(proc, 0) + 1
        self.behind = len(self._wanted)
        if late:
            log.debug("regency: lines of %s not forwarded within %s s", late, TIMEOUT_S)
            self._wake()  # others waiting for those marks need not wait out their own second


def _settle(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


#: The controller's book (one controller per process).
book = CatchUp()
