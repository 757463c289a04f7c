"""A ``this_host()`` proc's printed lines reach the terminal before the reply after them.

A proc's ``stdout`` and ``stderr`` are pipes that its host agent reads, prefixes and
writes to the controller's terminal; its replies go straight to the caller. The two paths
race, so ``print`` in an endpoint could show *after* the caller had printed the result.

For the procs whose agent is the controller's own (``this_host()``), a reply does not leave
while lines printed before it may still be in the pipes. :class:`Marked` counts each write
to ``sys.stdout`` or ``sys.stderr`` once it is done; a reply sent while some writes are not
known to be out flushes both streams into their pipes and waits until the agent has read
them (``FIONREAD``, which the writer can ask: the pipe is empty, or it went down, since one
read of the agent takes up to a whole pipe's capacity). The agent reads a pipe and writes
its lines holding the lock of the controller's stream they go to (``_output.held``), so the
script's next ``print`` there, which takes that lock too, comes after them. About one
wake-up of the controller's loop per printing call; a reply that follows no print costs
one comparison. A wait longer than :data:`TIMEOUT_S` (a stuck agent) lets the reply go:
order is given up, never a reply.

Procs of worker hosts are ordered another way (:mod:`._output_marks`, ADR 0039); such a
proc's output marks that reach a ``this_host()`` proc it answered are passed on from here
(:attr:`Fence.carried`). What bypasses ``sys.stdout`` (C code writing to fd 1, a
subprocess, ``sys.stdout.buffer``) is ordered only if it reached the pipe first; a line
without its newline waits for the newline.
"""

from __future__ import annotations

import array
import fcntl
import logging
import os
import stat
import sys
import termios
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

from .. import config
from .._wire._messages import OutputMark
from ._output_carry import Carried, Pending, as_list

if TYPE_CHECKING:
    from ._runtime import Runtime

__all__ = ["Fence", "Marked", "flush_streams", "install", "pipes"]

log = logging.getLogger("regency.output")

#: Seconds a reply may wait for the controller's agent to read this proc's pipes.
TIMEOUT_S = 1.0


class Marked:
    """Stands in for ``sys.stdout`` or ``sys.stderr`` in a proc: counts each write in its
    :class:`Fence` once it is done; everything else goes to the stream it wraps."""

    def __init__(self, stream: TextIO, fence: Fence) -> None:
        self.wrapped = stream
        self._fence = fence

    def write(self, text: str) -> int:
        """Write ``text``; the next reply waits for it to reach the terminal."""
        n = self.wrapped.write(text)
        self._fence.wrote()
        return n

    def writelines(self, lines: Any) -> None:
        """Write each of ``lines``."""
        self.wrapped.writelines(lines)
        self._fence.wrote()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


class Fence:
    """A proc's replies wait for the output printed before them (any thread).

    Writes are counted once done (``written``); ``drained`` is the count known to be read
    by the agent. A count taken before a flush covers every write counted in it, whichever
    thread wrote it (counted before the write was done, a write could be taken as covered
    by another thread's flush that came before its bytes).
    """

    def __init__(self, pipes: list[int], controllers: set[str]) -> None:
        self.written = 0  # writes to sys.stdout and sys.stderr done (and marks received)
        self.drained = 0  # writes whose bytes the agent has read
        self.pipes = pipes  # our stdout and stderr pipes (write ends: fds 1 and 2)
        self.controllers = controllers
        # the output marks of worker procs this one called, passed on (ADR 0039)
        self.carried = Carried("")  # it makes no marks of its own (it waits instead)
        # re-entrant: a __del__ or a signal handler may print on a thread inside wrote()
        self._counting = threading.RLock()

    def wrote(self) -> None:
        """Count one write, done (any thread)."""
        with self._counting:
            self.written += 1

    def carry(self, mark: OutputMark) -> None:
        """A worker's proc this one called marked its output: pass it on (loop thread)."""
        if self.carried.add(mark):
            self.wrote()  # the next message looks

    def before_send(self, dest: str) -> Pending | None:
        """Before a reply or system message (to any ``dest``): :meth:`wait_out`; then the
        marks of worker procs this one called go just before it, if ``dest`` lacks them."""
        self.wait_out()
        if not self.carried:
            return None
        self.drained = -1  # until they reach the controller, each message looks
        if not self.carried.unsaid(dest, self.controllers):
            return None
        version = self.carried.version
        carried = self.carried.snapshot()
        return Pending(OutputMark(as_list(carried)), dest, version, carried)

    def sent(self, pending: Pending) -> None:
        """The marks of ``pending`` are on their way."""
        self.carried.said(pending.dest, self.controllers, pending.carried, pending.version)

    def wait_out(self) -> None:
        """Before a reply: flush, and return once the agent has read what was written."""
        target = self.written
        flush_streams()
        _wait_read(self.pipes)
        if target > self.drained:  # a stale smaller value from a racing thread only
            self.drained = target  # makes a later reply wait once more

    def after_fork(self) -> None:
        """In a child forked by a proc: a lock another thread may have held is new."""
        self._counting = threading.RLock()
        self.carried.after_fork()


def flush_streams() -> None:
    """Flush ``sys.stdout`` and ``sys.stderr`` (each that is open)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - closed, broken, or a user's object without flush
            pass  # nothing of it can be ordered; the reply must still go


def _wait_read(fds: list[int]) -> None:
    """Return once the agent has read each pipe of ``fds`` since the call: it is empty, or
    its unread count went down (a read takes up to the whole pipe, so what was in it then
    is read, whatever a subprocess writes meanwhile); after :data:`TIMEOUT_S` at most."""
    count = array.array("i", [0])
    deadline = 0.0
    turns = 0
    for fd in fds:
        last = -1
        while True:
            try:
                fcntl.ioctl(fd, termios.FIONREAD, count, True)
            except OSError:
                break
            now_unread = count[0]
            if not now_unread or 0 <= now_unread < last:
                break
            last = now_unread
            now = time.monotonic()
            if not deadline:
                deadline = now + TIMEOUT_S
            elif now > deadline:
                log.debug("regency: the host agent left output unread for %s s", TIMEOUT_S)
                return
            turns += 1
            if turns < 200:  # the agent is a wake-up away: give it the CPU
                os.sched_yield()
            else:
                time.sleep(0.0002)


def pipes() -> list[int]:
    """Our fds 1 and 2, those that are pipes."""
    found = []
    for fd in (1, 2):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                found.append(fd)
        except OSError:
            pass
    return found


def install(rt: Runtime) -> Fence | None:
    """Order ``rt``'s replies after this proc's printed output (a proc, before it serves;
    ``rt.root`` and ``rt.host_agent`` set). None, and nothing wrapped, unless the proc's
    agent is the controller's, ``order_output`` and log forwarding are on, and a stream is
    a pipe."""
    if not (config.get("order_output") and config.get("enable_log_forwarding")):
        return None
    if rt.host_agent != rt.root:  # a worker's agent: not ordered (see the module's doc)
        return None
    piped = pipes()
    if not piped:
        return None
    fence = Fence(piped, {rt.root, *rt.root_addresses})
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Marked):
            setattr(sys, name, Marked(stream, fence))
    os.register_at_fork(after_in_child=fence.after_fork)
    rt.output_fence = fence
    return fence
