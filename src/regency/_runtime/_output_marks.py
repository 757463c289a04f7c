"""A worker's proc says how much it had printed when it answers the controller.

A proc on a worker host prints into pipes that the worker's host agent reads and forwards
to the controller (``proc_output``), while its replies go to the controller on the proc's
own connection: the two race, and a result usually showed before the line its endpoint
printed. Nothing can be held in the proc (it may die the moment after it answers) and the
two connections have no order, so the controller orders them (ADR 0039):

* the proc's ``sys.stdout`` and ``sys.stderr`` are :class:`Counted`: each counts the bytes
  it passed to its pipe;
* before a reply or system message to the controller, while some bytes are not marked yet,
  the proc flushes both streams and sends :class:`OutputMark` (the two counts) on the same
  path, just before it; the agent stamps each ``proc_output`` with the bytes it has read
  from that pipe so far;
* the controller (:mod:`._output_catchup`) lets a ``get()`` return, or an ``await`` go on,
  once the lines up to every mark that came before are written, or after
  :data:`~._output_catchup.TIMEOUT_S`.

What bypasses ``sys.stdout`` (C code, a subprocess) is counted by the agent but not by the
proc, which can only make a mark come true sooner: such lines are not ordered.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, TextIO

from .. import config
from .._wire._messages import OutputMark
from ._output_fence import flush_streams, pipes

__all__ = ["Counted", "Marks", "install"]


class Counted:
    """Stands in for ``sys.stdout`` (``index`` 0) or ``sys.stderr`` (1) in a worker's proc:
    counts the bytes of each write once it is done; everything else is the wrapped
    stream's."""

    def __init__(self, stream: TextIO, marks: Marks, index: int) -> None:
        self.wrapped = stream
        self._marks = marks
        self._index = index

    def write(self, text: str) -> int:
        """Write ``text`` and count its bytes, as the stream encodes them."""
        n = self.wrapped.write(text)
        self._marks.wrote(self._index, _size(self.wrapped, text))
        return n

    def writelines(self, lines: Any) -> None:
        """Write each of ``lines``."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


def _size(stream: TextIO, text: str) -> int:
    if text.isascii():
        return len(text)
    try:
        return len(text.encode(stream.encoding or "utf-8", stream.errors or "strict"))
    except (LookupError, UnicodeError):
        return 0  # the write went through, somehow: an undercount only loses order


class Marks:
    """The bytes a worker's proc wrote to its pipes (``written``), and the total it last
    said to the controller (``drained``, as :class:`~._output_fence.Fence` names it)."""

    def __init__(self, proc: str, controllers: set[str], piped: dict[int, int]) -> None:
        self.proc = proc
        self.controllers = controllers  # the addresses a mark goes before a message to
        self._piped = piped  # fd -> inode of the pipe it was when counting began
        self.written = 0
        self.drained = 0
        self._counts = [0, 0]
        # re-entrant: a __del__ or a signal handler may print on a thread inside wrote()
        self._lock = threading.RLock()

    def wrote(self, index: int, size: int) -> None:
        """Count ``size`` bytes written to stream ``index`` (any thread)."""
        with self._lock:
            self._counts[index] += size
            self.written += size

    def before_send(self, dest: str) -> OutputMark | None:
        """Before a message to ``dest``: the mark to send just before it, if it goes to the
        controller (the streams flushed, so the bytes counted are in the pipes)."""
        if dest not in self.controllers:
            return None
        if _inodes(self._piped) != self._piped:  # fd 1 or 2 sent elsewhere (os.dup2)
            self.controllers = set()  # what it counts may never reach its agent: no marks
            return None
        with self._lock:
            total, counts = self.written, list(self._counts)
        flush_streams()
        if total > self.drained:
            self.drained = total
        return OutputMark(self.proc, counts[0], counts[1])

    def after_fork(self) -> None:
        """In a child forked by a proc: a lock another thread may have held is new."""
        self._lock = threading.RLock()


def _inodes(fds: dict[int, int]) -> dict[int, int]:
    found = {}
    for fd in fds:
        try:
            found[fd] = os.fstat(fd).st_ino
        except OSError:
            found[fd] = -1
    return found


def install(proc: str, controllers: set[str]) -> Marks | None:
    """Count what this worker's proc writes to its stdout and stderr pipes (before it
    serves). None, and nothing wrapped, unless ``order_output`` and log forwarding are on
    and a stream is a pipe."""
    if not (config.get("order_output") and config.get("enable_log_forwarding")):
        return None
    piped = _inodes(dict.fromkeys(pipes(), 0))
    if not controllers or not piped:
        return None
    marks = Marks(proc, controllers, piped)
    for index, name in enumerate(("stdout", "stderr")):
        stream = getattr(sys, name)
        if index + 1 in piped and stream is not None and not isinstance(stream, Counted):
            setattr(sys, name, Counted(stream, marks, index))  # a file's count stays 0
    os.register_at_fork(after_in_child=marks.after_fork)
    return marks
