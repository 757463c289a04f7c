"""A proc's printed lines reach the controller's terminal before the reply that follows them.

A proc's ``stdout`` and ``stderr`` are pipes that its host agent reads, prefixes and
forwards (on a worker, as ``ProcOutput`` to the controller); its replies go straight to the
caller. The two paths race, so ``print`` in an endpoint could show *after* the caller had
printed the result. Here, a proc sends no reply while lines it printed may still be on the
way. :class:`Marked` notices a write to ``sys.stdout`` or ``sys.stderr``; the next reply
flushes both into their pipes first, then:

* *The host agent is the controller's* (its ``this_host()`` procs): the reply waits until
  the pipes are empty (``FIONREAD``), which a proc can see for itself. The agent reads a
  pipe and writes its lines while it holds the locks of the controller's ``sys.stdout`` and
  ``sys.stderr`` (``_output.held``), so the script's next ``print``, which takes the lock
  too, comes after them. About one wake-up of the controller's loop per printing call.
* *A worker's agent*: the reply is held and an :class:`OutputFence` goes to the agent, which
  reads the pipes dry, forwards their lines and passes the fence on behind them; the
  controller answers :class:`OutputFenceAck` once it has written them, and the held
  replies go, in the order they were sent. At most one fence is out at a time; replies
  sent while it is out wait behind it, and if more was printed meanwhile, one new fence
  covers them all when the answer comes, so a proc printing on every call of a pipeline
  still answers a batch per round trip.

A reply that follows no print costs one attribute test. A wait longer than
:data:`TIMEOUT_S` (a busy or lost agent) lets its replies go anyway: order is given up,
never a reply. What bypasses ``sys.stdout`` (C code writing to fd 1, a subprocess) is
ordered only if it reached the pipe first; a line not ended by a newline waits for its end.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import logging
import os
import stat
import sys
import termios
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from .. import config
from .._wire._messages import PortRef, SystemMessage, system_message

if TYPE_CHECKING:
    from ._runtime import Runtime

__all__ = ["Marked", "OutputFence", "OutputFenceAck", "Fence", "install"]

log = logging.getLogger("regency.output")

#: Seconds a fence may hold replies back before they go unordered.
TIMEOUT_S = 1.0


@system_message("output_fence")
@dataclass(slots=True)
class OutputFence(SystemMessage):
    """From a proc to its host agent (and from a worker's agent to the controller): answer
    ``proc`` with ``OutputFenceAck(token)`` once the lines it printed so far are out."""

    proc: str
    token: int


@system_message("output_fence_ack")
@dataclass(slots=True)
class OutputFenceAck(SystemMessage):
    """To a proc: the lines it printed before fence ``token`` have been written."""

    token: int


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
    """A proc's replies held behind the output printed before them (any thread).

    Writes are counted once done (``written``); ``drained`` is the count known to be out.
    A reply from a thread whose writes are all counted, sent while ``written`` is above
    ``drained``, waits. A count taken before a flush covers every write counted in it,
    whichever thread wrote it."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.written = 0  # writes to sys.stdout and sys.stderr done
        self.drained = 0  # writes whose lines are out
        self.waiting = False  # replies are held: each new one queues behind them
        self._lock = threading.Lock()
        self._held: deque[tuple[int, PortRef, list[Any]]] = deque()  # (needs fence, port, frame)
        self._token = 0  # the last fence sent
        self._covers = 0  # the writes it covers
        self._out = False  # that fence is not answered yet
        self.fences = 0  # fences sent (statistics)
        # our stdout and stderr pipes, when the agent reading them is the controller's
        self.pipes: list[int] = []
        self._settled: asyncio.Future[None] | None = None  # ``settle`` waits on it

    def wrote(self) -> None:
        """Count one write, done (any thread)."""
        with self._lock:
            self.written += 1

    def hold(self, port: PortRef, frame: list[Any]) -> bool:
        """Keep a reply's frame until the output before it is out; False: send it now."""
        if self.pipes:  # our agent writes to the controller's terminal: wait for it to read
            target = self.written
            _flush()
            _wait_read(self.pipes)
            with self._lock:
                self.drained = max(self.drained, target)
            return False
        with self._lock:
            written = self.written
            if self._out and written <= self._covers:
                need = self._token
            elif written <= self.drained:
                need = 0
            else:
                need = self._token + 1
            if self._held:
                need = max(need, self._held[-1][0])
            if not need:
                return False
            if need > self._token and not self._out:
                self._send_fence()
            self._held.append((need, port, frame))
            self.waiting = True
            return True

    def answered(self, token: int) -> None:
        """Fence ``token`` was answered (or timed out): send what it held (loop thread)."""
        with self._lock:
            if token != self._token or not self._out:
                return  # an old fence's late answer, or its timeout after the answer
            self._out = False
            self.drained = max(self.drained, self._covers)
            held = self._held
            while held and held[0][0] <= token:
                _, port, frame = held.popleft()
                self.rt.send_frame(port[0], frame)
            if held:  # printed again while this fence was out: one more covers the rest
                self._send_fence()
            self.waiting = bool(held)
            settled = self._settled
            if settled is not None and not settled.done():
                settled.set_result(None)

    def release(self) -> None:
        """Send every held reply now, in order."""
        with self._lock:
            self._out = False
            while self._held:
                _, port, frame = self._held.popleft()
                self.rt.send_frame(port[0], frame)
            self.waiting = False

    async def settle(self) -> None:
        """Let the held replies go as their fences are answered, then send what is left
        (the proc is stopping; loop thread)."""
        _flush()
        loop = self.rt.loop
        deadline = loop.time() + TIMEOUT_S
        while self.waiting and loop.time() < deadline:
            self._settled = loop.create_future()
            try:
                await asyncio.wait_for(self._settled, deadline - loop.time())
            except asyncio.TimeoutError:
                break
        self.release()

    def _send_fence(self) -> None:
        # lock held. The count is taken before the flush: what it counts is in the pipes
        self._covers = self.written
        _flush()
        self._token += 1
        self._out = True
        self.fences += 1
        token = self._token
        self.rt.send_sys(self.rt.host_agent, OutputFence(self.rt.address, token))
        self.rt.loop.call_soon_threadsafe(self._arm_timeout, token)

    def _arm_timeout(self, token: int) -> None:
        self.rt.loop.call_later(TIMEOUT_S, self._timed_out, token)

    def _timed_out(self, token: int) -> None:
        if token == self._token and self._out:
            log.debug("regency: output fence %d unanswered after %s s", token, TIMEOUT_S)
            self.answered(token)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stream: nothing of it can be fenced


def _wait_read(fds: list[int]) -> None:
    """Return once the pipes ``fds`` hold no unread bytes (or after :data:`TIMEOUT_S`)."""
    count = array.array("i", [0])
    deadline = 0.0
    turns = 0
    for fd in fds:
        while True:
            try:
                fcntl.ioctl(fd, termios.FIONREAD, count, True)
            except OSError:
                break
            if not count[0]:
                break
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


def _pipes() -> list[int]:
    """Our fds 1 and 2, those that are pipes."""
    found = []
    for fd in (1, 2):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                found.append(fd)
        except OSError:
            pass
    return found


def install(rt: Runtime) -> Fence:
    """Fence ``rt``'s replies behind this proc's printed output (a proc, before it serves;
    ``rt.root`` and ``rt.host_agent`` set)."""
    fence = Fence(rt)
    if not (config.get("order_output") and config.get("enable_log_forwarding")):
        return fence  # nothing marked: no reply waits
    if rt.host_agent == rt.root:  # the controller's own agent reads our pipes
        fence.pipes = _pipes()
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Marked):
            setattr(sys, name, Marked(stream, fence))
    rt.handle(OutputFenceAck, lambda msg: fence.answered(msg.token))
    rt.output_fence = fence
    return fence
