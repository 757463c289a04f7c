"""Data-plane benchmark: RDMABuffer read_into / write_from per transport vs a plain memcpy.

One proc owns a buffer (``numpy.ones``, pages touched); the controller reads it into, and
writes it from, a preallocated, touched local array of the same size, forcing each transport
in turn. The reference is ``numpy.copyto`` between two touched arrays of the same size in one
process: the physical limit of a single-copy transfer on this machine. Each figure is the
median of several runs after one warm-up, in GB/s (10^9 bytes per second).

Run from the repository root::

    .venv/bin/python benchmarks/dataplane.py                       # 1 MiB, 64 MiB, 1 GiB
    .venv/bin/python benchmarks/dataplane.py --sizes 1M,64M --transports vm,tcp --runs 9

It prints a markdown table on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np

from regency.actor import Actor, endpoint, this_host
from regency.rdma import RDMABuffer

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class Owner(Actor):
    """Owns one buffer at a time."""

    def __init__(self) -> None:
        self.buf: RDMABuffer | None = None
        self.data: Any = None

    @endpoint
    def make(self, nbytes: int) -> RDMABuffer:
        self.free()
        self.data = np.ones(nbytes, dtype=np.uint8)
        self.buf = RDMABuffer(self.data)
        return self.buf

    @endpoint
    def free(self) -> None:
        if self.buf is not None:
            self.buf.drop().get()
        self.buf = self.data = None

    @endpoint
    def ping(self) -> str:
        return "pong"


def parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def label(n: int) -> str:
    for unit in ("G", "M", "K"):
        if n >= UNITS[unit] and n % UNITS[unit] == 0:
            return f"{n // UNITS[unit]} {unit}iB"
    return f"{n} B"


def runs_for(n: int, runs: int | None) -> int:
    if runs is not None:
        return runs
    return 30 if n <= 4 << 20 else 9 if n <= 256 << 20 else 5


def median_gbps(n: int, runs: int, fn: Any) -> float:
    fn()  # warm-up: connections, page tables
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return n / statistics.median(times) / 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1M,64M,1G")
    ap.add_argument("--transports", default="vm,unix,tcp")
    ap.add_argument("--runs", type=int, default=None, help="runs per figure (default by size)")
    args = ap.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]

    procs = this_host().spawn_procs(per_host={"procs": 1}, name="dataplane-bench")
    owner = procs.spawn("owner", Owner).slice(procs=0)
    rows = []
    try:
        for n in sizes:
            runs = runs_for(n, args.runs)
            src = np.ones(n, dtype=np.uint8)
            dst = np.zeros(n, dtype=np.uint8)
            dst[:] = 2  # touch every page of both
            print(f"{label(n)}: memcpy", file=sys.stderr, flush=True)
            row: dict[str, float] = {"memcpy": median_gbps(n, runs, lambda: np.copyto(dst, src))}
            del src
            buf = owner.make.call_one(n).get(timeout=120)
            for t in transports:
                print(f"{label(n)}: {t}", file=sys.stderr, flush=True)
                row[f"{t} read"] = median_gbps(
                    n, runs, lambda t=t: buf.read_into(dst, transport=t).get(timeout=300))
                row[f"{t} write"] = median_gbps(
                    n, runs, lambda t=t: buf.write_from(dst, transport=t).get(timeout=300))
            owner.free.call_one().get(timeout=60)
            del dst
            rows.append((n, runs, row))
    finally:
        procs.stop().get(timeout=60)
    print(table(rows, transports))
    return 0


def table(rows: list[tuple[int, int, dict[str, float]]], transports: list[str]) -> str:
    cols = ["memcpy"] + [f"{t} {d}" for t in transports for d in ("read", "write")]
    head = "| size | runs | " + " | ".join(cols) + " |"
    sep = "|" + "---|" * (len(cols) + 2)
    lines = [head, sep]
    for n, runs, row in rows:
        cells = [f"{row['memcpy']:.2f}"]
        for c in cols[1:]:
            cells.append(f"{row[c]:.2f} ({100 * row[c] / row['memcpy']:.0f}%)")
        lines.append(f"| {label(n)} | {runs} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("GB/s, median of `runs` after a warm-up; (%) of memcpy of the same size. "
                 "Reader: the controller; owner: one proc on the same host.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
