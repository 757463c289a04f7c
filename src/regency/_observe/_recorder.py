"""What one process records, and how it leaves: a queue of rows flushed off the hot path.

Every process of a recording job (the controller and each proc) has one :class:`Recorder`.
Code that records appends a ``(table, values)`` row to a deque (atomic, any thread) and goes
on; a timer on the process's event loop takes what is queued every ``FLUSH_S`` seconds, adds
the per-actor call counts and a sample of each actor and of the process (CPU, memory, queue
depths), and hands the batch to the *sink*: the controller's store, or an ``observe_batch``
system message to the controller from a proc.

Calls are sampled when hot: each process records at most ``observe_call_rate`` calls per
second one by one (table ``calls``); every call is counted (table ``call_counts``).
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import config

if TYPE_CHECKING:
    from ._store import Row

__all__ = ["FLUSH_S", "ActorTap", "Recorder", "active", "now_us", "set_active"]

FLUSH_S = 0.5
SAMPLE_S = 1.0


def now_us() -> int:
    """The time now in microseconds since the epoch."""
    return time.time_ns() // 1000


class ActorTap:
    """The counters of one actor: changed only by the thread that runs the actor."""

    __slots__ = ("actor", "cell", "counts", "last_handled", "last_sample", "mesh",
                 "recorded", "seen")

    def __init__(self, actor: str, mesh: str) -> None:
        self.actor = actor
        self.mesh = mesh
        self.counts: dict[str, int] = {}  # endpoint -> calls handled
        self.recorded: dict[str, int] = {}  # endpoint -> calls recorded one by one
        self.seen: dict[str, tuple[int, int]] = {}  # what the last flush reported
        self.last_handled = 0
        self.last_sample: tuple[int, int, float] | None = None
        self.cell: Any = None


class Recorder:
    """The rows one process has recorded and not yet flushed."""

    def __init__(self, proc: str, sink: Callable[[list[Row]], None], call_rate: int,
                 sample: Callable[[], tuple[float, int]] | None = None) -> None:
        self.proc = proc
        self.sink = sink
        self.rows: collections.deque[Row] = collections.deque()
        self.call_rate = call_rate
        self.budget = int(call_rate * FLUSH_S)  # calls that may still be recorded one by one
        self.taps: dict[str, ActorTap] = {}  # actor id -> tap
        self._metrics: dict[tuple[str, str, str], list[float]] = {}
        self._metrics_lock = threading.Lock()
        self._sample = sample
        self._last_sample = time.monotonic()
        self.sample_s = float(config.get("observe_sample_interval"))
        self.closed = False

    # -- recording (any thread) ----------------------------------------------------------------
    def add(self, table: str, values: tuple[Any, ...]) -> None:
        """Queue one row."""
        self.rows.append((table, values))

    def event(self, kind: str, actor: str | None, mesh: str | None, summary: str,
              detail: dict[str, Any] | None = None, proc: str | None = None) -> None:
        """Queue an event (spawn, stop, failure, ...)."""
        text = json.dumps(detail, default=str) if detail else None
        self.rows.append(("events", (now_us(), kind, proc or self.proc, actor, mesh, summary,
                                     text)))

    def metric(self, name: str, kind: str, value: float,
               attributes: dict[str, Any] | None) -> None:
        """Add to a metric; one row per metric and attribute set per flush."""
        attrs = json.dumps(attributes, sort_keys=True, default=str) if attributes else ""
        key = (name, kind, attrs)
        with self._metrics_lock:
            acc = self._metrics.get(key)
            if acc is None:
                self._metrics[key] = [value, 1.0]
            elif kind == "gauge":
                acc[0] = value
                acc[1] += 1
            else:
                acc[0] += value
                acc[1] += 1

    def tap(self, actor: str, mesh: str) -> ActorTap:
        """The counters of a new actor of this process."""
        tap = self.taps[actor] = ActorTap(actor, mesh)
        return tap

    # -- flushing (the loop thread) ------------------------------------------------------------
    def flush(self, sample: bool = False) -> None:
        """Hand everything recorded so far to the sink (with samples every
        ``observe_sample_interval``, or now if ``sample``)."""
        rows = self._take()
        ts = now_us()
        self._counts(rows, ts)
        self._metric_rows(rows, ts)
        now = time.monotonic()
        if sample or (self.sample_s > 0 and now - self._last_sample >= self.sample_s):
            self._samples(rows, ts, now - self._last_sample)
            self._last_sample = now
        self.budget = int(self.call_rate * FLUSH_S)
        if rows:
            self.sink(rows)

    def _take(self) -> list[Row]:
        queued = self.rows
        return [queued.popleft() for _ in range(len(queued))]

    def _counts(self, rows: list[Row], ts: int) -> None:
        for tap in list(self.taps.values()):
            counts, recorded = dict(tap.counts), dict(tap.recorded)
            for endpoint, n in counts.items():
                before = tap.seen.get(endpoint, (0, 0))
                r = recorded.get(endpoint, 0)
                if n != before[0]:
                    rows.append(("call_counts", (ts, self.proc, tap.actor, tap.mesh, endpoint,
                                                 n - before[0], r - before[1])))
                    tap.seen[endpoint] = (n, r)

    def _metric_rows(self, rows: list[Row], ts: int) -> None:
        with self._metrics_lock:
            metrics, self._metrics = self._metrics, {}
        for (name, kind, attrs), (value, count) in metrics.items():
            rows.append(("metrics", (ts, self.proc, name, kind, value, int(count), attrs or None)))

    def _samples(self, rows: list[Row], ts: int, elapsed: float) -> None:
        if self._sample is not None:
            cpu, rss = self._sample()
            rows.append(("proc_sample", (ts, cpu, rss, self.proc)))
        for tap in list(self.taps.values()):
            handled = sum(tap.counts.values())
            queue = _queue_depth(tap.cell)
            rate = round((handled - tap.last_handled) / elapsed, 2) if elapsed > 0 else 0.0
            tap.last_handled = handled
            if tap.last_sample == (handled, queue, rate):
                continue  # nothing moved: no row
            tap.last_sample = (handled, queue, rate)
            rows.append(("actor_sample", (ts, queue, handled, rate, tap.actor)))


def _queue_depth(cell: Any) -> int:
    """Messages waiting in an actor's mailbox (0 when the cell does not say)."""
    q = getattr(cell, "_queue", None)
    try:
        return int(q.qsize()) if q is not None else 0
    except (NotImplementedError, AttributeError):
        return 0


_active: Recorder | None = None


def active() -> Recorder | None:
    """This process's recorder, or None when recording is off."""
    return _active


def set_active(rec: Recorder | None) -> None:
    """Make ``rec`` this process's recorder."""
    global _active
    _active = rec
