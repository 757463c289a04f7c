"""Where a sync round trip's time goes on a busy machine: stalls, and which CPU each end ran on.

Runs ``call_one(1).get()`` in a loop beside ``--load`` CPU-bound processes, ``--reps`` times
(a fresh proc each time, as the suite does), and reports per rep: calls/s, the median call,
the share of the time spent in calls slower than ``--stall-ms`` (a thread that waited for a
CPU), and, from a sampler process reading ``/proc`` every 50 ms, the share of samples in
which the controller's thread and the proc's busiest thread sat on the same CPU::

    .venv/bin/python -m benchmarks.stalls --load 4 --reps 6

A benchmark, not a test: what it shows is the kernel's scheduling of the two ends of a
round trip (see docs/benchmarks.md, "2026-12-06 late evening").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks._actors import SyncPinger
from benchmarks.run import cpu_load
from regency.actor import this_host

_SAMPLER = r"""
import json, sys, time
out, until, tids = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
rows = []
while time.monotonic() < until:
    row = []
    for tid in tids:
        try:
            with open(f"/proc/{tid}/stat") as f:
                row.append(int(f.read().rsplit(")", 1)[1].split()[36]))
        except (OSError, ValueError, IndexError):
            row.append(-1)
    rows.append(row)
    time.sleep(0.05)  # seldom: a process that wakes often changes what it measures
with open(out, "w") as f:
    json.dump(rows, f)
"""


def _threads(pid: int) -> list[str]:
    return [f"{pid}/task/{t.id}" for t in psutil.Process(pid).threads()]


def one_rep(calls: int, stall_ns: int, seconds: float, load: set[int]) -> dict[str, float]:
    """One fresh proc, ``calls`` sync calls; the figures of the run (``load``: the pids of
    the CPU-bound processes, children of this one too)."""
    procs = this_host().spawn_procs(per_host={"procs": 1})
    try:
        mesh = procs.spawn("stalls", SyncPinger)
        for _ in range(50):
            mesh.ping.call_one(1).get()
        me = os.getpid()
        kids = [k.pid for k in psutil.Process(me).children(recursive=True) if k.pid not in load]
        tids = [f"{me}/task/{me}", *(t for k in kids for t in _threads(k))]
        before = [_used(t) for t in tids]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp, "cpus.json")
            sampler = subprocess.Popen([sys.executable, "-c", _SAMPLER, str(out),
                                        str(time.monotonic() + seconds), *tids],
                                       start_new_session=True)
            times, stalled = _loop(mesh, calls, stall_ns)
            sampler.wait()
            rows = json.loads(out.read_text())
        # the proc's reading thread: the one (besides ours) that ran most during the loop
        busy = max(range(1, len(tids)), key=lambda i: _used(tids[i]) - before[i])
    finally:
        procs.stop().get()
    same = [r[0] == r[busy] for r in rows if r[0] >= 0 and r[busy] >= 0]
    total = sum(times)
    return {"calls_per_s": calls / (total / 1e9), "p50_us": statistics.median(times) / 1e3,
            "stalled_share": stalled / total, "same_cpu_share": sum(same) / max(len(same), 1)}


def _loop(mesh: object, calls: int, stall_ns: int) -> tuple[list[int], int]:
    call = mesh.ping.call_one  # type: ignore[attr-defined]
    clock = time.perf_counter_ns
    times: list[int] = []
    stalled = 0
    for _ in range(calls):
        start = clock()
        call(1).get()
        took = clock() - start
        times.append(took)
        if took > stall_ns:
            stalled += took
    return times, stalled


def _used(tid: str) -> int:
    """Nanoseconds the thread ran so far (0 once it is gone)."""
    try:
        with open(f"/proc/{tid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError):
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--load", type=int, default=4, help="CPU-bound processes beside it")
    parser.add_argument("--reps", type=int, default=6, help="fresh procs, one run each")
    parser.add_argument("--calls", type=int, default=25_000, help="calls per run")
    parser.add_argument("--stall-ms", type=float, default=0.5,
                        help="a call slower than this counts as stalled")
    args = parser.parse_args()
    with cpu_load(args.load) as burners:
        load = {p.pid for p in burners}
        time.sleep(1.0)  # let the load spread over the CPUs, as in a suite run
        for rep in range(args.reps):
            # the sampler covers the run at its slowest seen here (10k calls/s), then stops
            r = one_rep(args.calls, int(args.stall_ms * 1e6), args.calls / 10_000 + 1.0, load)
            print(f"run {rep + 1}: {r['calls_per_s']:8,.0f} calls/s  p50 {r['p50_us']:5.1f} us  "
                  f"stalled {r['stalled_share']:4.0%} of the time  "
                  f"both ends on one CPU in {r['same_cpu_share']:4.0%} of samples", flush=True)


if __name__ == "__main__":
    main()
