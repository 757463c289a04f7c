"""A worker's proc says how much it had printed when it answers the controller.

A proc on a worker host prints into pipes that the worker's host agent reads and forwards
to the controller (``proc_output``), while its replies go to the controller on the proc's
own connection: the two race, and a result usually showed before the line its endpoint
printed. Nothing can be held in the proc (it may die the moment after it answers) and the
two connections have no order, so the controller orders them (ADR 0039):

* the proc's ``sys.stdout`` and ``sys.stderr`` are :class:`Counted`: each counts the bytes
  it passed to its pipe;
* before a reply or system message, while something is unsaid to its destination, the
  proc flushes both streams and sends :class:`OutputMark` on the same path, just before
  it: its two counts, and the marks of procs it called (``_output_carry``), which a proc
  passes on until they reach the controller; the agent stamps each ``proc_output`` with
  the bytes it has read from that pipe so far;
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
from ._output_carry import Carried, Pending, as_list
from ._output_fence import flush_streams, pipes

__all__ = ["Counted", "Marks", "install"]


class Counted:
    """Stands in for ``sys.stdout`` (``index`` 0) or ``sys.stderr`` (1) in a worker's proc:
    counts the bytes of each write once it is done, when its fd is still the pipe it was
    (a write while ``os.dup2`` sent the fd elsewhere never reaches the agent); everything
    else is the wrapped stream's."""

    def __init__(self, stream: TextIO, marks: Marks, index: int, inode: int) -> None:
        self.wrapped = stream
        self._marks = marks
        self._index = index
        self._fd = index + 1
        self._inode = inode

    def write(self, text: str) -> int:
        """Write ``text`` and count its bytes, as the stream encodes them."""
        n = self.wrapped.write(text)
        if _inode(self._fd) == self._inode:  # a whole line each time (WholeLines above)
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


def _inode(fd: int) -> int:
    try:
        return os.fstat(fd).st_ino
    except OSError:
        return -1


class Marks:
    """What a worker's proc has to say before its messages: the bytes it wrote to its pipes,
    and the marks of procs it called (:class:`~._output_carry.Carried`).

    ``written`` counts changes (a counted write, a mark received); ``drained`` is the count
    the last mark sent to the controller covered (the names :class:`~._output_fence.Fence`
    gives ``Runtime`` to compare), ``told`` the same per other destination. A mark goes
    before a message to the controller while something is unsaid there, and before one to
    another proc while something is unsaid to that proc (it passes the marks on); passed-on
    marks are forgotten once they reach the controller.
    """

    def __init__(self, proc: str, controllers: set[str]) -> None:
        self.proc = proc
        self.controllers = controllers  # where marks end (the controller's addresses)
        self.written = 0
        self.drained = 0
        self.told: dict[str, int] = {}  # another proc -> ``written`` its last mark covered
        self.carried = Carried(proc)
        self._counts = [0, 0]
        # re-entrant: a __del__ or a signal handler may print on a thread inside wrote()
        self._lock = threading.RLock()

    @property
    def counts(self) -> tuple[int, int]:
        """The bytes counted so far: (stdout's, stderr's)."""
        return self._counts[0], self._counts[1]

    def wrote(self, index: int, size: int) -> None:
        """Count ``size`` bytes written to stream ``index`` (any thread)."""
        with self._lock:
            self._counts[index] += size
            self.written += 1

    def carry(self, mark: OutputMark) -> None:
        """A proc this one called marked its output (loop thread): pass it on."""
        if self.carried.add(mark):  # news (not this proc's own mark coming back)
            with self._lock:
                self.written += 1

    def before_send(self, dest: str) -> Pending | None:
        """Before a message to ``dest``: the mark to send just before it (the streams
        flushed, so the bytes counted are in the pipes), or None. :meth:`sent` once it is
        on its way; until then a message another thread sends makes a mark of its own."""
        with self._lock:
            version = self.written
            if dest not in self.controllers and version <= self.told.get(dest, 0):
                return None
            own = (self.proc, self._counts[0], self._counts[1])
        carried = self.carried.snapshot()
        flush_streams()
        return Pending(OutputMark([own, *as_list(carried)]), dest, version, carried)

    def sent(self, pending: Pending) -> None:
        """``pending``'s mark is on its way."""
        with self._lock:
            if pending.dest not in self.controllers:
                self.told[pending.dest] = max(self.told.get(pending.dest, 0), pending.version)
                return
            self.drained = max(self.drained, pending.version)
        self.carried.settle(pending.carried)

    def after_fork(self) -> None:
        """In a child forked by a proc: a lock another thread may have held is new."""
        self._lock = threading.RLock()
        self.carried.after_fork()


def install(proc: str, controllers: set[str]) -> Marks | None:
    """Count what this worker's proc writes to its stdout and stderr pipes (before it
    serves). None, and nothing wrapped, unless ``order_output`` and log forwarding are on
    and a stream is a pipe."""
    if not (config.get("order_output") and config.get("enable_log_forwarding")):
        return None
    piped = pipes()
    if not controllers or not piped:
        return None
    marks = Marks(proc, controllers)
    for index, name in enumerate(("stdout", "stderr")):
        stream = getattr(sys, name)
        if index + 1 in piped and stream is not None and not isinstance(stream, Counted):
            setattr(sys, name, Counted(stream, marks, index, _inode(index + 1)))
    os.register_at_fork(after_in_child=marks.after_fork)
    return marks
