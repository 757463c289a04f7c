"""Casts to large meshes with the relay tree and without it: sender CPU and latency.

Run: ``python benchmarks/multicast.py [--sizes 16 64 128] [--casts 40]``. For each mesh size
and each mode (``tree``: fan-out 16, the default; ``direct``: fan-out larger than the mesh,
so the sender writes to every member), it prints a markdown table of:

* sender CPU per ``broadcast`` (thread CPU time of the calling thread: the sender's own work);
* median latency of a ``call().get()`` (cast plus gather of every reply).
"""

from __future__ import annotations

import argparse
import statistics
import time

from regency import config
from regency.actor import Actor, endpoint, this_host


class Pinger(Actor):
    """Answers pings."""

    @endpoint
    def ping(self, x: int) -> int:
        return x


def measure(size: int, fanout: int, casts: int) -> tuple[float, float]:
    with config.configured(max_cast_fanout=fanout):
        procs = this_host().spawn_procs(per_host={"procs": size})
        mesh = procs.spawn("pingers", Pinger)
    try:
        mesh.ping.call(0).get(timeout=120)
        start = time.thread_time()
        for i in range(casts):
            mesh.ping.broadcast(i)
        cpu_us = (time.thread_time() - start) / casts * 1e6
        mesh.ping.call(0).get(timeout=120)  # the broadcasts are done
        lat = []
        for i in range(casts):
            t0 = time.perf_counter()
            mesh.ping.call(i).get(timeout=120)
            lat.append(time.perf_counter() - t0)
        return cpu_us, statistics.median(lat) * 1e3
    finally:
        procs.stop().get(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 128])
    parser.add_argument("--casts", type=int, default=40)
    args = parser.parse_args()
    print("| procs | mode | sender CPU per broadcast (µs) | call+gather p50 (ms) |")
    print("|---|---|---|---|")
    for size in args.sizes:
        for mode, fanout in (("tree (fan-out 16)", 16), ("direct", 1 << 20)):
            cpu, lat = measure(size, fanout, args.casts)
            print(f"| {size} | {mode} | {cpu:.0f} | {lat:.1f} |", flush=True)


if __name__ == "__main__":
    main()
