"""Forwarded output never lands inside a line the controller's own code is writing.

The controller prints procs' output (``[mesh rank] line``) from its loop thread while the
user's script prints from the main thread. ``print("x")`` is two writes, ``"x"`` then
``"\\n"``; a forwarded line written between them would cut the user's line in two. So the
controller's ``sys.stdout`` and ``sys.stderr`` are each wrapped in a :class:`LineGuard`
(:func:`install`): every write goes through one lock and records whether the stream is at
the start of a line. Forwarded text (:func:`write_whole`) is written whole, under that lock,
and only there; while the script has a line open it is held and written as soon as the line
ends. A line left open longer than :data:`HOLD_S` (a progress indicator waiting on a call,
say) is ended by the forwarded text instead (:meth:`LineGuard.release_overdue`), so the
procs' output is never held back for long.

Whatever else the wrapper is asked (``fileno``, ``encoding``, ``buffer``...) goes to the
stream it wraps. Where the script replaced ``sys.stdout`` itself, forwarded text is written
to that stream as before, in one write.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

#: Seconds a line the script leaves open may hold back forwarded output.
HOLD_S = 1.0


class Terminal:
    """Where one or more guarded streams end up: the lock their writes take, and the
    forwarded text held back while a line of any of them is open. ``sys.stdout`` and
    ``sys.stderr`` share one when they are the same file (a terminal, or ``2>&1``): a line
    forwarded to either then never lands inside a line the script writes to the other."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # re-entered by a signal handler that prints
        self.guards: list[LineGuard] = []
        self.held: list[tuple[LineGuard, str]] = []  # forwarded, in order, for each stream
        self.held_since = 0.0

    def line_open(self) -> bool:
        """Whether the script has part of a line written to any of the streams (lock held)."""
        return any(g.line_open for g in self.guards)

    def end_lines(self) -> None:
        """End the script's open lines (lock held)."""
        for g in self.guards:
            if g.line_open:
                g.wrapped.write("\n")
                g.line_open = False

    def release(self) -> None:
        """Write the held text, each to its stream (lock held)."""
        held, self.held = self.held, []
        for g, text in held:
            g.wrapped.write(text)
            g.wrapped.flush()  # a block-buffered stream must not fall behind the other


class LineGuard:
    """Stands in for a text stream; knows whether the last write through it ended a line."""

    def __init__(self, stream: TextIO, terminal: Terminal | None = None) -> None:
        self.wrapped = stream
        self.terminal = terminal if terminal is not None else Terminal()
        self.terminal.guards.append(self)
        self.line_open = False  # the script has written part of a line and not its end

    @property
    def lock(self) -> threading.RLock:
        """The lock every write through this guard takes."""
        return self.terminal.lock

    # -- the script's side: what ``print`` and friends call --------------------------------
    def write(self, text: str) -> int:
        """Write ``text`` for the script; forwarded text held back follows a line's end."""
        term = self.terminal
        with term.lock:
            n = self.wrapped.write(text)
            if text:
                self.line_open = not text.endswith("\n")
                if term.held and not term.line_open():
                    term.release()
            return n

    def writelines(self, lines: Any) -> None:
        """Write each of ``lines`` as :meth:`write` does."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Flush the wrapped stream."""
        with self.terminal.lock:
            self.wrapped.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    # -- the forwarding side ---------------------------------------------------------------
    def forward(self, text: str) -> bool:
        """Write ``text`` (whole lines) at a line boundary of the script's output; returns
        True when it is held until the script's open line ends (see
        :meth:`release_overdue`)."""
        term = self.terminal
        with term.lock:
            if term.line_open():
                if not term.held:
                    term.held_since = time.monotonic()
                term.held.append((self, text))
                return True
            self.wrapped.write(text)
            self.wrapped.flush()
            return False

    def interject(self, text: str) -> None:
        """Write ``text`` now, whole; if the script has a line open, end that line first
        (for a report that must not wait)."""
        term = self.terminal
        with term.lock:
            term.end_lines()
            term.held.append((self, text))
            term.release()

    def release_overdue(self) -> None:
        """Write held text if it has waited :data:`HOLD_S` (ending the open line first)."""
        term = self.terminal
        with term.lock:
            if term.held and time.monotonic() - term.held_since >= HOLD_S * 0.999:
                term.end_lines()
                term.release()

    def release(self) -> None:
        """Write whatever is held, at once (at exit), ending the open line first."""
        term = self.terminal
        with term.lock:
            if term.held:
                term.end_lines()
                term.release()


def _same_file(a: TextIO, b: TextIO) -> bool:
    try:
        one, two = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False
    return (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino)


def install() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in a :class:`LineGuard` each (idempotent);
    one :class:`Terminal` for both when they are the same file."""
    out, err = sys.stdout, sys.stderr
    shared = None
    if (out is not None and err is not None and not isinstance(out, LineGuard)
            and not isinstance(err, LineGuard) and _same_file(out, err)):
        shared = Terminal()
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, LineGuard):
            setattr(sys, name, LineGuard(stream, shared))


def guard(kind: str) -> LineGuard | None:
    """The guard of ``sys.stdout`` (``kind`` "stdout") or ``sys.stderr``, if it has one."""
    stream = sys.stderr if kind == "stderr" else sys.stdout
    return stream if isinstance(stream, LineGuard) else None


def interject(text: str) -> None:
    """Write ``text`` on stderr at once and whole, after the line the script has open (a
    report, a notice); a closed stderr takes nothing, and nothing is raised."""
    text = text.rstrip() + "\n"
    try:
        g = guard("stderr")
        if g is not None:
            g.interject(text)
        else:
            sys.stderr.write(text)
            sys.stderr.flush()
    except (OSError, ValueError):
        pass


def write_whole(kind: str, text: str) -> bool:
    """Write ``text`` (whole lines) to ``sys.stdout`` or ``sys.stderr`` (``kind``), never
    inside a line the script is writing. Returns True when it is held back for now: call
    :meth:`LineGuard.release_overdue` of :func:`guard` after :data:`HOLD_S`."""
    stream = sys.stderr if kind == "stderr" else sys.stdout
    if isinstance(stream, LineGuard):
        return stream.forward(text)
    if stream is not None:
        stream.write(text)
        stream.flush()
    return False


@contextlib.contextmanager
def held(kind: str) -> Iterator[None]:
    """Hold the lock of ``sys.stdout`` (``kind`` "stdout") or ``sys.stderr`` (its guard's):
    the script's writes to it wait meanwhile. The host agent reads a proc's pipe and writes
    its lines inside: a proc that saw its pipe read (``_output_fence``) knows the lines come
    before any line the script writes there after that. (Two streams to one file share
    one lock; two files show no order between them.)"""
    g = guard(kind)
    if g is None:
        yield
        return
    with g.lock:
        yield


def release_all() -> None:
    """Write all held text now (the program is ending)."""
    for kind in ("stdout", "stderr"):
        g = guard(kind)
        if g is not None:
            try:
                g.release()
            except (OSError, ValueError):
                pass
