"""A proc's printed lines reach the controller's terminal before the reply that follows them.

A proc's ``stdout`` and ``stderr`` are pipes that its host agent reads, prefixes and
forwards (on a worker, as ``ProcOutput`` to the controller); its replies go straight to the
caller. The two paths race, so ``print`` in an endpoint could show *after* the caller had
printed the result. Here a reply never leaves before the lines printed before it.
:class:`Marked` counts each write to ``sys.stdout`` or ``sys.stderr`` once it is done; a
reply sent while some are not known to be out flushes both streams into their pipes, then:

* *The host agent is the controller's* (its ``this_host()`` procs): the reply waits until
  the pipes are empty (``FIONREAD``), which a proc can see for itself. The agent reads a
  pipe and writes its lines holding the lock of the controller's stream they go to
  (``_output.held``), so the script's next ``print`` to it, which takes that lock too,
  comes after them. About one wake-up of the controller's loop per printing call.
* *A worker's agent*: the reply goes to the agent instead, as a :class:`RelayFrame`. The
  agent reads the pipes dry, forwards their lines to the controller, then sends the reply
  on; to the controller it travels behind the lines, on one connection, in order. Until
  the agent says it has passed on every frame relayed so far (:class:`RelayAck`), what the
  proc sends next (replies, system messages) takes the same way, so nothing overtakes a
  relayed reply. The proc keeps nothing back: a proc that dies right after answering has
  its answer delivered all the same.

A reply that follows no print costs one attribute test. The wait for a local agent is
bounded by :data:`TIMEOUT_S` (a busy or stopped agent): order is given up, never a reply.
What bypasses ``sys.stdout`` (C code writing to fd 1, a subprocess) is ordered only if it
reached the pipe first; a line without its newline waits for the newline; calls an actor
makes (not replies) are not ordered after its output.
"""

from __future__ import annotations

import array
import fcntl
import logging
import os
import pickle
import stat
import sys
import termios
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from .. import config
from .._wire._messages import SystemMessage, system_message

if TYPE_CHECKING:
    from ._runtime import Runtime

__all__ = ["Fence", "Marked", "RelayAck", "RelayFrame", "install"]

log = logging.getLogger("regency.output")

#: Seconds a reply may wait for the controller's agent to read this proc's pipes.
TIMEOUT_S = 1.0


@system_message("relay_frame")
@dataclass(slots=True)
class RelayFrame(SystemMessage):
    """From a proc to its host agent: pass on the lines the proc printed so far, then send
    ``parts`` (an encoded frame) to ``to``, and answer ``RelayAck(seq)``."""

    proc: str
    to: str
    seq: int
    parts: list[Any]  # pickle.PickleBuffer each when sent: out of band, not copied


@system_message("relay_ack")
@dataclass(slots=True)
class RelayAck(SystemMessage):
    """To a proc: its host agent has sent on every frame relayed up to ``seq``."""

    seq: int


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
    """Orders a proc's replies after the output printed before them (any thread).

    Writes are counted once done (``written``); ``drained`` is the count known to be out
    (read from the pipes, or behind a relayed frame). A count taken before a flush covers
    every write counted in it, whichever thread wrote it.
    """

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.written = 0  # writes to sys.stdout and sys.stderr done
        self.drained = 0  # writes whose lines are out, or go out before what is sent next
        self.waiting = False  # frames relayed and not yet passed on: later ones follow them
        self.relayed = 0  # frames relayed through the host agent
        self.acked = 0  # ... of which the agent has passed on so many
        # our stdout and stderr pipes, when the agent reading them is the controller's
        self.pipes: list[int] = []
        # Re-entrant: the garbage collector (a __del__) or a signal handler may print, or
        # send, on a thread that holds them. ``_counting`` guards ``written`` alone.
        self._counting = threading.RLock()
        self._lock = threading.RLock()

    def wrote(self) -> None:
        """Count one write, done (any thread)."""
        with self._counting:
            self.written += 1

    def hold(self, to: str, frame: list[Any]) -> bool:
        """Called for a frame to ``to`` while some output may not be out, or frames are
        relayed: True when it took the frame (it goes through the host agent), False
        when the caller sends it as usual (after the wait for a local agent)."""
        if self.pipes:  # our agent writes to the controller's terminal: wait for it to read
            target = self.written
            _flush()
            _wait_read(self.pipes)
            with self._lock:
                self.drained = max(self.drained, target)
            return False
        with self._lock:
            target = self.written
            if target <= self.drained and not self.waiting:
                return False
            _flush()  # what the count covers is in the pipes before the agent hears of it
            self.drained = max(self.drained, target)
            self.relayed += 1
            self.waiting = True
            rt = self.rt
            parts = [pickle.PickleBuffer(part) for part in frame]
            rt.send_sys(rt.host_agent, RelayFrame(rt.address, to, self.relayed, parts))
            return True

    def passed_on(self, seq: int) -> None:
        """The agent sent on every frame relayed up to ``seq`` (loop thread)."""
        with self._lock:
            self.acked = max(self.acked, seq)
            self.waiting = self.relayed > self.acked

    def after_fork(self) -> None:
        """In a child forked by a proc: locks another thread may have held are new."""
        self._counting = threading.RLock()
        self._lock = threading.RLock()


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stream: nothing of it can be ordered


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


def install(rt: Runtime) -> Fence | None:
    """Order ``rt``'s replies after this proc's printed output (a proc, before it serves;
    ``rt.root`` and ``rt.host_agent`` set). None when ``order_output`` or log forwarding
    is off."""
    if not (config.get("order_output") and config.get("enable_log_forwarding")):
        return None
    fence = Fence(rt)
    if rt.host_agent == rt.root:  # the controller's own agent reads our pipes
        fence.pipes = _pipes()
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Marked):
            setattr(sys, name, Marked(stream, fence))
    rt.handle(RelayAck, lambda msg: fence.passed_on(msg.seq))
    os.register_at_fork(after_in_child=fence.after_fork)
    rt.output_fence = fence
    return fence
