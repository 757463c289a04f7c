"""Lines printed by two threads of one proc reach its output whole, never torn.

Actors of one proc run on threads of their own. ``print("done")`` is two writes, the text and
the newline, so two actors printing at once left ``donedone`` and an empty line in the output
(and in a failure report's last lines). A proc's ``sys.stdout`` and ``sys.stderr`` are
:class:`WholeLines`: what a thread writes goes out a whole line at a time; the end of a line
it has not finished waits for the rest of it, for the thread's own ``flush()``, or for the
proc's exit (:func:`flush_all`). A piece longer than :data:`HOLD_LIMIT` goes out as it is.
What bypasses ``sys.stdout`` (C code writing to fd 1, a subprocess) is not held.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any, TextIO

__all__ = ["HOLD_LIMIT", "WholeLines", "flush_all", "install"]

#: Characters of an unfinished line a thread may hold before they go out anyway.
HOLD_LIMIT = 65536


class WholeLines:
    """Stands in for a proc's ``sys.stdout`` or ``sys.stderr``: each thread's writes go to
    the stream it wraps a whole line at a time; everything else is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.wrapped = stream
        self._open: dict[int, str] = {}  # thread ident -> its unfinished line
        # re-entrant: a __del__ or a signal handler may print on a thread inside write()
        self._lock = threading.RLock()

    def write(self, text: str) -> int:
        """Write ``text``; an unfinished last line waits for its end."""
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        me = threading.get_ident()
        with self._lock:
            held = self._open.pop(me, "") + text
            cut = held.rfind("\n") + 1
            if not cut and len(held) <= HOLD_LIMIT:
                if held:
                    self._open[me] = held
                return len(text)
            cut = cut or len(held)
            if cut < len(held):
                self._open[me] = held[cut:]
            self.wrapped.write(held[:cut])
        return len(text)

    def writelines(self, lines: Any) -> None:
        """Write each of ``lines``."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Send the calling thread's unfinished line (and those of threads that ended),
        then flush the wrapped stream. Other threads' unfinished lines stay theirs: a
        ``logging`` handler flushing after its record must not cut another thread's print."""
        me = threading.get_ident()
        with self._lock:
            ended = set(self._open) - {me}
            if ended:
                ended -= {thread.ident for thread in threading.enumerate()}
            self._send({me} | ended)
            self.wrapped.flush()

    def flush_all(self) -> None:
        """Send every thread's unfinished line and flush (the proc is ending)."""
        with self._lock:
            self._send(set(self._open))
            self.wrapped.flush()

    def after_fork(self) -> None:
        """In a child a proc forked: the lock another thread may have held is new, and the
        unfinished lines of the parent's other threads stay the parent's to write (the
        forking thread's own goes on in the child, as a buffered stream's would)."""
        self._lock = threading.RLock()
        me = threading.get_ident()
        self._open = {me: self._open[me]} if me in self._open else {}

    def _send(self, idents: set[int]) -> None:
        pieces = [self._open.pop(ident) for ident in idents if ident in self._open]
        if pieces:
            self.wrapped.write("".join(pieces))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


def flush_all() -> None:
    """Flush ``sys.stdout`` and ``sys.stderr`` with every thread's unfinished line (exit)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                getattr(stream, "flush_all", stream.flush)()
        except Exception:  # noqa: BLE001 - closed, broken, or a user's object without flush
            pass  # nothing more can go out; the exit goes on


def install() -> None:
    """Make this proc's ``sys.stdout`` and ``sys.stderr`` keep each thread's lines whole."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, WholeLines):
            lines = WholeLines(stream)
            setattr(sys, name, lines)
            os.register_at_fork(after_in_child=lines.after_fork)
    atexit.register(flush_all)
