"""Elastic meshes: time from ``kill -9`` of a rank to the respawned rank answering.

    .venv/bin/python benchmarks/respawn.py                 # 10 kills, {gpus: 4}
    .venv/bin/python benchmarks/respawn.py --runs 20 --gpus 8 --json out.json

Each run kills one rank of a ``{gpus: N}`` mesh of trainers with SIGKILL while the
controller waits on a call to it, then ``procs.respawn()``s it and calls the new one.
Figures (median and max over the runs, milliseconds):

* ``detect``: the kill -> the pending call raises ``SupervisionError``;
* ``respawn``: ``procs.respawn()`` (new proc forked, trainer rebuilt, ``__init__`` done);
* ``total``: the kill -> the respawned rank's first answer.

Only regency has this (Monarch and Ray rebuild the whole mesh), so there is no peer column.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import time
from typing import Any

import regency.actor as ra
from regency.actor import Actor, SupervisionError, endpoint, this_host


class Trainer(Actor):
    """A rank that holds a little state and can be asked its pid."""

    def __init__(self, size: int) -> None:
        self.state = bytes(size)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def wait(self, seconds: float) -> None:
        time.sleep(seconds)


def one_run(procs: Any, trainers: Any, rank: int) -> dict[str, float]:
    """Kill ``rank`` under a pending call, respawn it, call it; the three times (ms)."""
    member = trainers.slice(gpus=rank)
    pid = member.pid.call_one().get(timeout=30)
    pending = member.wait.call_one(30.0)
    t0 = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    try:
        pending.get(timeout=30)
        raise RuntimeError("the call to the killed rank returned")
    except SupervisionError:
        t1 = time.perf_counter()
    procs.respawn([rank])
    t2 = time.perf_counter()
    new = member.pid.call_one().get(timeout=30)
    t3 = time.perf_counter()
    assert new != pid
    return {"detect": (t1 - t0) * 1e3, "respawn": (t2 - t1) * 1e3, "total": (t3 - t0) * 1e3}


def main() -> None:
    """Run the benchmark and print its table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--gpus", type=int, default=4)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    ra.unhandled_fault_hook = lambda failure: None  # each kill is on purpose
    procs = this_host().spawn_procs(per_host={"gpus": args.gpus}, name="bench")
    trainers = procs.spawn("trainers", Trainer, 1 << 20)
    trainers.pid.call().get(timeout=60)
    runs = [one_run(procs, trainers, i % args.gpus) for i in range(args.runs)]
    procs.stop().get(timeout=30)
    table = {k: {"median_ms": statistics.median(r[k] for r in runs),
                 "max_ms": max(r[k] for r in runs)} for k in ("detect", "respawn", "total")}
    print(f"respawn of one rank of {{gpus: {args.gpus}}}, {args.runs} runs")
    for k, v in table.items():
        print(f"  {k:8s} median {v['median_ms']:8.1f} ms   max {v['max_ms']:8.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "summary": table}, f, indent=2)


if __name__ == "__main__":
    main()
