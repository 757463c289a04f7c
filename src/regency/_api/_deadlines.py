"""Deadlines of calls (ADR 0041): ``with deadline(seconds):`` bounds the calls sent in it.

A call sent while a deadline holds carries the seconds it has left in its header
(``Call.budget``: relative, since hosts' clocks differ; a member counts them from the
header's arrival). Then:

* on the caller, a timer fails the call's future with ``DeadlineExceeded`` at the deadline
  and tells the members that have not answered to stop it, as ``Future.cancel()`` does
  (``_cancel``): one still queued is skipped, an async endpoint running it is cancelled;
* on a member, a call whose deadline passed while it waited in the mailbox is dropped when
  its turn comes, and answered with ``DeadlineExceeded`` (a broadcast's drop is said on
  the proc's stderr): the
  caller usually knows already, but a port of the user's (``send``) learns it only so;
* the endpoint that runs it sees the time left (``context().time_remaining()``), and the
  calls it sends inherit the deadline: one budget for a whole chain of calls.

The timer is one daemon thread per process, started by the first deadline: a heap of the
calls waiting, ordered by deadline. A call answered in time leaves a small entry in the
heap until its deadline (the call clears its own reference in it when it closes); the heap
drops the cleared entries whenever it has doubled since it last did, so it holds about
twice the calls pending at most.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import numbers
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from .._ratelog import notices
from ..errors import DeadlineExceeded
from ._cancel import cancel_call
from ._context import _current, deadline_scope, expiry_for

__all__ = ["deadline", "expire_late", "expired_before_sent", "not_sent", "scope",
           "seconds_text", "watch"]

#: The ``deadline()`` blocks' own (kept by ``_context``, which ``time_remaining`` reads).
scope = deadline_scope


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Calls sent in this block must be answered within ``seconds`` of entering it.

    A call not answered by then fails with :class:`~regency.errors.DeadlineExceeded` (a
    ``TimeoutError``), and the members that had not answered stop it, as for
    ``Future.cancel()``. The deadline travels with the call: the endpoint sees the time left
    (``context().time_remaining()``), and the calls it sends have the same deadline. Blocks
    nest; the earliest deadline holds. ``deadline(None)`` lifts every deadline in the block,
    the inherited one included (work an endpoint starts that should outlive its call).
    Not in Monarch.

    Raises:
        ValueError: ``seconds`` is negative, NaN or infinite.
        TypeError: ``seconds`` is not a real number (or None).
    """
    token = scope.set(math.inf if seconds is None else _expiry_in(seconds))
    try:
        yield
    finally:
        scope.reset(token)


def _expiry_in(seconds: Any) -> float:
    """When a block of ``seconds`` entered now ends, nested in the deadline in force."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise TypeError(f"deadline(seconds): seconds must be a number or None, not "
                        f"{type(seconds).__name__}")
    try:
        value = float(seconds)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"deadline(seconds): seconds must be finite and >= 0, got "
                         f"{seconds!r}")
    expires = time.monotonic() + value
    outer = expiry()
    return min(expires, outer) if outer else expires


def expiry() -> float:
    """When the calls sent now must be answered by (``time.monotonic()``), or 0.0."""
    return expiry_for(_current.get(None))


def expired_before_sent(label: str) -> DeadlineExceeded:
    """The error of a call whose deadline had passed when it was to be sent (not sent)."""
    return DeadlineExceeded(f"{label} was not sent: its deadline had passed")


def not_sent(label: str) -> None:
    """Say that a broadcast (or a send to a port) was not sent: its deadline had passed.
    Said on stderr, not raised: an endpoint that runs past its call's deadline inherits it, and
    a raise would fail the actor for a message nobody waits on."""
    notices.warning(label, "regency: %s was not sent: its deadline had passed", label)


def seconds_text(seconds: float) -> str:
    """``0.05``, ``5``, ``0.2``: a duration as a person wrote it, two decimals at most,
    rounded up: a deadline's seconds left when its call was sent, a few microseconds
    after ``deadline(5)`` was entered, read ``5``."""
    hundredths = math.ceil(round(seconds * 100, 6))
    return f"{hundredths / 100:.2f}".rstrip("0").rstrip(".") or "0"


def watch(call: Any, expires: float, seconds: float) -> list[Any]:
    """Fail ``call`` (a collector) at ``expires`` unless answered by then. Returns its entry
    in the timer's heap, whose last item the call clears when it closes (so that the heap
    does not keep an answered call's result)."""
    return _timer().add(expires, seconds, call)


class _Timer:
    """The thread that fails the calls whose deadline passed."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        # [expires, seq, seconds, call]: the call cleared (None) once answered
        self.heap: list[list[Any]] = []
        self.seq = itertools.count()
        self.started = False
        self.compact_at = 1024

    def add(self, expires: float, seconds: float, call: Any) -> list[Any]:
        entry = [expires, next(self.seq), seconds, call]
        with self.cond:
            heapq.heappush(self.heap, entry)
            if len(self.heap) > self.compact_at:
                self._compact()
            if not self.started:
                threading.Thread(target=self._run, name="regency-deadlines",
                                 daemon=True).start()
                self.started = True
            elif self.heap[0] is entry:  # earlier than what the thread waits for
                self.cond.notify()
        return entry

    def _compact(self) -> None:
        self.heap = [e for e in self.heap if e[3] is not None]
        heapq.heapify(self.heap)
        self.compact_at = max(1024, 2 * len(self.heap))

    def _run(self) -> None:
        while True:
            with self.cond:
                due = self._wait_due()
            for _, _, seconds, call in due:
                if call is not None:
                    _expire(call, seconds)

    def _wait_due(self) -> list[list[Any]]:
        heap = self.heap
        while True:
            if not heap:
                self.cond.wait()
                heap = self.heap
                continue
            now = time.monotonic()
            if heap[0][0] <= now:
                due = []
                while heap and heap[0][0] <= now:
                    due.append(heapq.heappop(heap))
                return due
            self.cond.wait(heap[0][0] - now)
            heap = self.heap


def expire_late(call: Any, entry: list[Any]) -> bool:
    """A reply came after ``call``'s deadline, before the timer failed it: it fails now,
    as the timer would have (a late answer is no answer: the outcome does not depend on
    which thread got there first). False where the call cannot be failed so (it takes the
    reply then)."""
    _expire(call, entry[2])
    return not call.pending()


def _expire(call: Any, seconds: float) -> None:
    if not call.pending():
        return
    error = DeadlineExceeded(f"{call.label} was not answered within its deadline "
                             f"({seconds_text(seconds)} s); {_ranks_text(call.expected)} "
                             "told to stop it")
    cancel_call(call, error)


def _ranks_text(ranks: set[int]) -> str:
    """``rank 3 was`` / ``ranks [0, 2] were`` / ``ranks [0, 1, ...] (300 in all) were``."""
    listed = sorted(ranks)
    if len(listed) == 1:
        return f"rank {listed[0]} was"
    if len(listed) <= 8:
        return f"ranks {listed} were"
    shown = ", ".join(map(str, listed[:8]))
    return f"ranks [{shown}, ...] ({len(listed)} in all) were"


_the_timer: _Timer | None = None
_making = threading.Lock()


def _timer() -> _Timer:
    global _the_timer
    timer = _the_timer
    if timer is None:
        with _making:
            timer = _the_timer
            if timer is None:
                timer = _the_timer = _Timer()
    return timer


def _forget_in_child() -> None:  # a forked child has no timer thread: it starts its own
    global _the_timer, _making
    _the_timer = None
    _making = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
