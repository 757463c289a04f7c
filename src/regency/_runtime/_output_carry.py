"""Marks of the procs a proc called, passed on to the controller (ADR 0039).

When the controller calls A and A calls B on a worker host, B's output mark reaches A, not
the controller: A keeps it (:class:`Carried`) and sends it, with its own, before its next
message to the controller, so the controller waits for B's lines too before it shows A's
result. A mark is what :class:`Pending` says to send before one message.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from .._wire._messages import OutputMark

__all__ = ["Carried", "Pending"]

Counts = dict[str, tuple[int, int]]  # proc -> (stdout bytes, stderr bytes)


class Pending(NamedTuple):
    """A mark to send just before a message to ``dest``, and what it says: ``version``,
    the sender's count of changes it covers, and ``carried``, the passed-on marks in it."""

    mark: OutputMark
    dest: str
    version: int
    carried: Counts


class Carried:
    """Marks received from procs this one called, until they are sent to the controller.

    ``version`` counts the changes; ``told`` is, per other proc, the version a mark sent
    there covered (a mark goes to each proc once per change, or two procs calling each
    other would send each other the same marks for ever).
    """

    def __init__(self, me: str) -> None:
        self.me = me
        self.version = 0
        self.told: dict[str, int] = {}
        self._marks: Counts = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._marks)

    def add(self, mark: OutputMark) -> bool:
        """Keep the marks of ``mark`` (the highest counts of each proc, not this one's own
        coming back); whether that changed anything."""
        changed = False
        with self._lock:
            for proc, out, err in mark.marks:
                old = self._marks.get(proc, (0, 0))
                if proc != self.me and (out > old[0] or err > old[1]):
                    self._marks[proc] = (max(old[0], out), max(old[1], err))
                    changed = True
            if changed:
                self.version += 1
        return changed

    def unsaid(self, dest: str, controllers: set[str]) -> bool:
        """Whether a message to ``dest`` needs the marks kept: all of them go to the
        controller; to another proc, once per change."""
        if not self._marks:
            return False
        return dest in controllers or self.version > self.told.get(dest, 0)

    def said(self, dest: str, controllers: set[str], sent: Counts, version: int) -> None:
        """A mark with ``sent`` (of ``version``) is on its way to ``dest``."""
        if dest in controllers:
            self.settle(sent)
            return
        with self._lock:
            self.told[dest] = max(self.told.get(dest, 0), version)

    def snapshot(self) -> Counts:
        """The marks kept now."""
        with self._lock:
            return dict(self._marks)

    def settle(self, sent: Counts) -> None:
        """``sent`` reached the controller: forget each mark no higher one replaced since."""
        with self._lock:
            for proc, counts in sent.items():
                if self._marks.get(proc) == counts:
                    del self._marks[proc]

    def after_fork(self) -> None:
        """In a child forked by a proc: the lock is new, the parent's marks its own."""
        self._lock = threading.Lock()
        self._marks = {}
        self.told = {}


def as_list(counts: Counts) -> list[tuple[str, int, int]]:
    """``counts`` as the triples of an :class:`OutputMark`."""
    return [(proc, out, err) for proc, (out, err) in counts.items()]
