"""What recording costs: sync round trip with the event store off, on, and on with a dashboard.

    .venv/bin/python benchmarks/observe.py                  # 5 interleaved runs per variant
    .venv/bin/python benchmarks/observe.py --runs 9 --calls 5000

Each run is a fresh controller process (recording is decided when the runtime starts) that
makes ``--calls`` sync ``call_one(x).get()`` round trips to one actor on one proc, after a
warm-up, and reports the median round trip. Variants run interleaved (off, on, dash, off,
...) so a busy machine slows them alike; the table shows each variant's median over runs and
its cost against ``off``, as the ratio of medians and as the median of the ratios within each
round ("paired", steadier on a shared machine). The target (issue 16): ``on`` within 5 % of
``off``.
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

CHILD = r"""
import json, sys, time
from regency import config
from regency.actor import Actor, endpoint, this_host
variant, calls, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if variant != "off":
    config.configure(observe=True, observe_dir=folder, dashboard=variant == "dash")

class Echo(Actor):
    @endpoint
    def ping(self, x: int) -> int:
        return x

procs = this_host().spawn_procs(per_host={"procs": 1})
echo = procs.spawn("echo", Echo)
for i in range(500):
    echo.ping.call_one(i).get()
samples = []
for i in range(calls):
    t0 = time.perf_counter_ns()
    echo.ping.call_one(i).get()
    samples.append(time.perf_counter_ns() - t0)
procs.stop().get()
samples.sort()
print("@@obs " + json.dumps({"p50_us": samples[len(samples) // 2] / 1000,
                              "mean_us": sum(samples) / len(samples) / 1000}))
"""

VARIANTS = ("off", "on", "dash")


def run_once(variant: str, calls: int, folder: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, variant, str(calls), folder],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    for line in out.stdout.splitlines():
        if line.startswith("@@obs "):
            return float(json.loads(line[6:])["p50_us"])
    raise RuntimeError(f"{variant} run failed:\n{out.stdout}\n{out.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    results: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as folder:
        for run in range(args.runs):
            for variant in VARIANTS:
                p50 = run_once(variant, args.calls, folder)
                results[variant].append(p50)
                print(f"run {run + 1}/{args.runs} {variant}: p50 {p50:.1f} us",
                      file=sys.stderr)
    base = statistics.median(results["off"])
    print(f"sync round trip, {args.calls} calls, median of {args.runs} runs "
          f"({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)")
    print(f"{'variant':8} {'p50 us':>8} {'vs off':>8} {'paired':>8}")
    for variant in VARIANTS:
        med = statistics.median(results[variant])
        # the median of (variant / off) within each round: a slow spell of a shared machine
        # hits both runs of a round alike, so this varies less than the ratio of medians
        paired = statistics.median(v / o for v, o in zip(results[variant], results["off"]))
        print(f"{variant:8} {med:8.1f} {100 * (med / base - 1):+7.1f}% {100 * (paired - 1):+7.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
