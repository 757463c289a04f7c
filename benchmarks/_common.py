"""Shared, dependency-free pieces of the benchmark suite.

Imported by the runner (project venv) and by the workload subprocesses (each framework's
own venv), so it must only use the standard library.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

Metrics = dict[str, float]
Workload = Callable[["Params"], Metrics]

MIB = 1024 * 1024

# Order matters only for the table: workloads run (and are listed) in this order.
WORKLOAD_NAMES: tuple[str, ...] = (
    "sync_rtt",
    "pipelined",
    "bcast_gather_4",
    "bcast_gather_16",
    "actor_to_actor",
    "actor_to_actor_same_proc",
    "echo_bytes_1MiB",
    "echo_bytes_16MiB",
    "echo_bytes_256MiB",
    "echo_numpy_1MiB",
    "echo_numpy_16MiB",
    "echo_numpy_256MiB",
    "a2a_echo_numpy_256MiB",
    "spawn_4",
    "spawn_16",
    "idle_worker_mem",
    "pipeline",
)

# Full-size echoes run before the timed ones, in every framework: figures are steady state
# (pools, object stores and page tables warmed up), not the first transfer's page faults.
ECHO_WARMUP = 2

# Prefix of the lines a workload subprocess writes on its result channel.
EVENT_PREFIX = "@@bench "


@dataclass(frozen=True)
class Params:
    """Iteration counts for one suite flavour (full or --quick)."""

    rtt_calls: int
    pipelined_calls: int
    bcast_iters: int
    a2a_calls: int
    warmup_calls: int
    echo_iters: dict[int, int]  # payload size in MiB -> timed iterations
    pipeline_s: float = 3.0  # how long the pipeline's producer sends
    # a timed loop goes on past its count until this long: 2,000 round trips took 45 ms (and
    # 80-130 ms beside CPU-bound processes), so one scheduler slice given to another process
    # (4-8 ms) swung a whole run; both frameworks get the same rule
    min_s: float = 1.0

    def echo_iterations(self, size_mib: int) -> int:
        return self.echo_iters[size_mib]


FULL = Params(
    rtt_calls=2000,
    pipelined_calls=2000,
    bcast_iters=200,
    a2a_calls=500,
    warmup_calls=50,
    echo_iters={1: 20, 16: 6, 256: 4},
)
QUICK = Params(
    rtt_calls=500,
    pipelined_calls=500,
    bcast_iters=50,
    a2a_calls=200,
    warmup_calls=20,
    echo_iters={1: 10, 16: 3, 256: 2},
    pipeline_s=1.0,
    min_s=0.25,
)


def params_for(quick: bool) -> Params:
    return QUICK if quick else FULL


# ----------------------------------------------------------------------------- metrics


def higher_is_better(metric: str) -> bool:
    """Throughput metrics end in ``_per_s``; everything else (latency, seconds, MiB) is a cost."""
    return metric.endswith("_per_s")


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in [0, 100]."""
    xs = sorted(samples)
    if not xs:
        return math.nan
    idx = min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))
    return xs[idx]


def latency_metrics(samples_ns: Sequence[int], total_s: float, rate_name: str) -> Metrics:
    """Rate plus p50/p99 in microseconds for a list of per-operation durations."""
    us = [s / 1000 for s in samples_ns]
    return {
        rate_name: len(samples_ns) / total_s,
        "p50_us": statistics.median(us),
        "p99_us": percentile(us, 99),
    }


def timed_loop(op: Callable[[], Any], n: int, min_s: float = 0.0) -> tuple[list[int], float]:
    """Run ``op`` sequentially ``n`` times, and on until ``min_s`` seconds have passed;
    return per-call ns and the total seconds."""
    samples: list[int] = []
    start = time.perf_counter()
    while True:
        for _ in range(n):
            t0 = time.perf_counter_ns()
            op()
            samples.append(time.perf_counter_ns() - t0)
        if time.perf_counter() - start >= min_s:
            return samples, time.perf_counter() - start


def burst_rate(burst: Callable[[], None], calls: int, min_s: float = 0.0) -> float:
    """Calls per second of ``burst`` (which makes ``calls`` calls), run again and again until
    ``min_s`` seconds have passed (once at least)."""
    bursts = 0
    start = time.perf_counter()
    while True:
        burst()
        bursts += 1
        total = time.perf_counter() - start
        if total >= min_s:
            return bursts * calls / total


def gb_per_s(size_bytes: int, seconds: Sequence[float]) -> Metrics:
    """Round-trip echo bandwidth: 2 * size over the median iteration time."""
    med = statistics.median(seconds)
    return {"GB_per_s": 2 * size_bytes / med / 1e9, "median_s": med}


# ----------------------------------------------------------------------------- child protocol


class EventWriter:
    """Writes ``@@bench {json}`` lines on a private channel (see ``_child.py``)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def emit(self, event: str, workload: str, **fields: Any) -> None:
        record = {"event": event, "workload": workload, **fields}
        self._stream.write(EVENT_PREFIX + json.dumps(record) + "\n")
        self._stream.flush()


def parse_event(line: str) -> dict[str, Any] | None:
    """Decode one result-channel line; ``None`` for anything that is not an event."""
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        event = json.loads(line[len(EVENT_PREFIX) :])
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


def repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def interleave(ops: dict[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    """Seconds per call of each op: one warm-up each, then ``runs`` rounds of all of them
    (interleaved, so that a machine whose speed drifts affects them alike). Standard
    library only: the peers' scripts import it in their own venvs."""
    for fn in ops.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(runs):
        for name, fn in ops.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times
