"""Deadlines of calls (ADR 0041): ``with deadline(seconds):`` bounds the calls sent in it.

A call sent while a deadline holds carries the seconds it has left in its header
(``Call.budget``: relative, since hosts' clocks differ; a member counts them from the
header's arrival). Then:

* on the caller, a timer fails the call's future with ``DeadlineExceeded`` at the deadline
  and tells the members that have not answered to stop it, as ``Future.cancel()`` does
  (``_cancel``): one still queued is skipped, an async endpoint running it is cancelled;
* on a member, a call whose deadline passed while it waited in the mailbox is dropped when
  its turn comes, and answered with ``DeadlineExceeded`` (a broadcast is logged): the
  caller usually knows already, but a port of the user's (``send``) learns it only so;
* the endpoint that runs it sees the time left (``context().time_remaining()``), and the
  calls it sends inherit the deadline: one budget for a whole chain of calls.

The timer is one daemon thread per process, started by the first deadline: a heap of the
calls waiting, ordered by deadline. A call answered in time stays in the heap until its
deadline, as a reference to its collector; the heap drops the answered ones whenever it has
doubled since it last did, so it holds at most about twice the calls pending.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import os
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from ..errors import DeadlineExceeded
from ._cancel import cancel_call
from ._context import _current

__all__ = ["deadline", "expired_before_sent", "scope", "watch"]

#: When the calls sent now must be answered by (``time.monotonic()``): 0.0 when the block
#: sets none (the call being handled may: its context's ``expires``), ``inf`` for
#: ``deadline(None)``, no deadline even where the call being handled has one.
scope: ContextVar[float] = ContextVar("regency_deadline", default=0.0)


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
    """
    if seconds is None:
        token = scope.set(math.inf)
    else:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"deadline(seconds): seconds must be a number or None, not "
                            f"{type(seconds).__name__}")
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"deadline(seconds): seconds must be finite and >= 0, got "
                             f"{seconds!r}")
        expires = time.monotonic() + float(seconds)
        outer = expiry()
        token = scope.set(min(expires, outer) if outer else expires)
    try:
        yield
    finally:
        scope.reset(token)


def expiry() -> float:
    """When the calls sent now must be answered by (``time.monotonic()``), or 0.0."""
    scoped = scope.get()
    if scoped:
        return 0.0 if scoped == math.inf else scoped
    ctx = _current.get(None)
    return ctx.expires if ctx is not None else 0.0


def expired_before_sent(label: str) -> DeadlineExceeded:
    """The error of a call whose deadline had passed when it was to be sent (not sent)."""
    return DeadlineExceeded(f"{label} was not sent: its deadline had passed")


def watch(call: Any, expires: float, seconds: float) -> None:
    """Fail ``call`` (a collector) at ``expires`` unless answered by then."""
    _timer().add(expires, seconds, call)


class _Timer:
    """The thread that fails the calls whose deadline passed."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.heap: list[tuple[float, int, float, Any]] = []  # (expires, seq, seconds, call)
        self.seq = itertools.count()
        self.started = False
        self.compact_at = 1024

    def add(self, expires: float, seconds: float, call: Any) -> None:
        with self.cond:
            heap = self.heap
            heapq.heappush(heap, (expires, next(self.seq), seconds, call))
            if len(heap) > self.compact_at:
                self._compact()
            if not self.started:
                self.started = True
                threading.Thread(target=self._run, name="regency-deadlines",
                                 daemon=True).start()
            elif heap[0][3] is call:  # earlier than what the thread waits for
                self.cond.notify()

    def _compact(self) -> None:
        self.heap = [e for e in self.heap if e[3].pending()]
        heapq.heapify(self.heap)
        self.compact_at = max(1024, 2 * len(self.heap))

    def _run(self) -> None:
        while True:
            with self.cond:
                due = self._wait_due()
            for _, _, seconds, call in due:
                _expire(call, seconds)

    def _wait_due(self) -> list[tuple[float, int, float, Any]]:
        heap = self.heap
        while True:
            if not heap:
                self.cond.wait()
                heap = self.heap
                continue
            left = heap[0][0] - time.monotonic()
            if left <= 0:
                due = []
                now = time.monotonic()
                while heap and heap[0][0] <= now:
                    due.append(heapq.heappop(heap))
                return due
            self.cond.wait(left)
            heap = self.heap


def _expire(call: Any, seconds: float) -> None:
    if not call.pending():
        return
    ranks = sorted(call.expected)
    who = f"rank {ranks[0]} was" if len(ranks) == 1 else f"ranks {ranks} were"
    error = DeadlineExceeded(f"{call.label} was not answered within its deadline "
                             f"({seconds:.3g} s); {who} told to stop it")
    cancel_call(call, error)


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
