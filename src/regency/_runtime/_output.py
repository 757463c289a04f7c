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

import sys
import threading
import time
from typing import Any, TextIO

#: Seconds a line the script leaves open may hold back forwarded output.
HOLD_S = 1.0


class LineGuard:
    """Stands in for a text stream; knows whether the last write through it ended a line."""

    def __init__(self, stream: TextIO) -> None:
        self.wrapped = stream
        self._lock = threading.RLock()  # re-entered by a signal handler that prints
        self._open = False  # the script has written part of a line and not its end
        self._held: list[str] = []  # forwarded text waiting for the end of that line
        self._held_since = 0.0

    # -- the script's side: what ``print`` and friends call --------------------------------
    def write(self, text: str) -> int:
        """Write ``text`` for the script; forwarded text held back follows a line's end."""
        with self._lock:
            n = self.wrapped.write(text)
            if text:
                self._open = not text.endswith("\n")
                if self._held and not self._open:
                    self._release()
            return n

    def writelines(self, lines: Any) -> None:
        """Write each of ``lines`` as :meth:`write` does."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Flush the wrapped stream."""
        with self._lock:
            self.wrapped.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    # -- the forwarding side ---------------------------------------------------------------
    def forward(self, text: str) -> bool:
        """Write ``text`` (whole lines) at a line boundary of the script's output; returns
        True when it is held until the script's open line ends (see
        :meth:`release_overdue`)."""
        with self._lock:
            if self._open:
                if not self._held:
                    self._held_since = time.monotonic()
                self._held.append(text)
                return True
            self.wrapped.write(text)
            self.wrapped.flush()
            return False

    def interject(self, text: str) -> None:
        """Write ``text`` now, whole; if the script has a line open, end that line first
        (for a report that must not wait)."""
        with self._lock:
            if self._open:
                self.wrapped.write("\n")
                self._open = False
            self._held.append(text)
            self._release()

    def release_overdue(self) -> None:
        """Write held text if it has waited :data:`HOLD_S` (ending the open line first)."""
        with self._lock:
            if self._held and time.monotonic() - self._held_since >= HOLD_S * 0.999:
                if self._open:
                    self.wrapped.write("\n")
                    self._open = False
                self._release()

    def release(self) -> None:
        """Write whatever is held, at once (at exit), ending the open line first."""
        with self._lock:
            if self._held:
                if self._open:
                    self.wrapped.write("\n")
                    self._open = False
                self._release()

    def _release(self) -> None:
        held, self._held = self._held, []
        self.wrapped.write("".join(held))
        self.wrapped.flush()


def install() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in a :class:`LineGuard` each (idempotent)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, LineGuard):
            setattr(sys, name, LineGuard(stream))


def guard(kind: str) -> LineGuard | None:
    """The guard of ``sys.stdout`` (``kind`` "stdout") or ``sys.stderr``, if it has one."""
    stream = sys.stderr if kind == "stderr" else sys.stdout
    return stream if isinstance(stream, LineGuard) else None


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


def release_all() -> None:
    """Write all held text now (the program is ending)."""
    for kind in ("stdout", "stderr"):
        g = guard(kind)
        if g is not None:
            try:
                g.release()
            except (OSError, ValueError):
                pass
