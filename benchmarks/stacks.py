"""How long ``ProcMesh.stacks()`` takes: every thread of N procs, one busy in a tight loop.

    .venv/bin/python benchmarks/stacks.py [--procs 16] [--runs 10]

Prints the median and worst of ``--runs`` dumps (the issue asks for 16 procs within 1 s).
regency only: Monarch 0.7.0 has no stack dump of its procs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from regency.actor import Actor, current_rank, endpoint, this_host


class Busy(Actor):
    """Rank 0 spins in pure Python until ``flag`` exists; the others sleep."""

    @endpoint
    def hold(self, flag: str) -> None:
        n = 0
        while not (n % 100_000 == 0 and os.path.exists(flag)):
            n += 1
            if current_rank().rank != 0 and n % 100_000 == 0:
                time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--procs", type=int, default=16)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    procs = this_host().spawn_procs(per_host={"procs": args.procs})
    procs.initialized.get()
    flag = os.path.join(tempfile.mkdtemp(), "go")
    fut = procs.spawn("busy", Busy).hold.call(flag)
    times = []
    try:
        for _ in range(args.runs):
            start = time.perf_counter()
            stacks = procs.stacks()
            times.append(time.perf_counter() - start)
            assert not stacks.missing, stacks.missing
    finally:
        open(flag, "w").close()
        fut.get()
        procs.stop().get()
    print(f"stacks of {args.procs} procs: median {statistics.median(times) * 1e3:.1f} ms, "
          f"worst {max(times) * 1e3:.1f} ms over {args.runs} runs")


if __name__ == "__main__":
    main()
