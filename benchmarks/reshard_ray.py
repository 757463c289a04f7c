"""Ray's side of ``reshard.py --ray``: the same layout change through Ray's object store.

Ray has no one-sided buffers or layouts: 4 trainer actors hold their row blocks of a float32
tensor; each step the controller asks every trainer for its block (``ray.put`` into the
shared-memory object store on return) and hands the 4 references to each of the 2 generator
actors, which ``ray.get`` them (zero-copy maps on one node) and copy their columns out.
The reference, in the same rounds, is ``reshard.py``'s: both column halves copied out of a
full local array. Run by ``reshard.py --ray`` under ``.bench-venvs/ray/bin/python``::

    .bench-venvs/ray/bin/python benchmarks/reshard_ray.py --size 67108864 --runs 7

The last stdout line is JSON with the keys of ``reshard.measure``'s row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np
import ray

COLS = 4096
TRAINERS = 4
GENERATORS = int(os.environ.get("RESHARD_BENCH_GENERATORS", "2"))


def split(size: int, index: int, parts: int) -> tuple[int, int]:
    small, extra = divmod(size, parts)
    start = index * small + min(index, extra)
    return start, start + small + (1 if index < extra else 0)


@ray.remote(num_cpus=0)
class Trainer:
    def __init__(self, rows: int, rank: int) -> None:
        lo, hi = split(rows, rank, TRAINERS)
        self.data = np.full((hi - lo, COLS), rank + 1, dtype=np.float32)

    def block(self) -> Any:
        return self.data


@ray.remote(num_cpus=0)
class Generator:
    def __init__(self, rows: int, rank: int) -> None:
        self.rows = rows
        self.cols = split(COLS, rank, GENERATORS)
        self.dst = np.zeros((rows, self.cols[1] - self.cols[0]), dtype=np.float32)

    def pull(self, refs: list[Any]) -> float:
        c0, c1 = self.cols
        for i, block in enumerate(ray.get(refs)):
            lo, hi = split(self.rows, i, TRAINERS)
            self.dst[lo:hi] = block[:, c0:c1]
        return float(self.dst[0, 0])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    rows = args.size // (4 * COLS)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    trainers = [Trainer.remote(rows, r) for r in range(TRAINERS)]
    generators = [Generator.remote(rows, r) for r in range(GENERATORS)]
    full = np.ones((rows, COLS), dtype=np.float32)
    parts = [np.zeros((rows, COLS // GENERATORS), dtype=np.float32)
             for _ in range(GENERATORS)]

    def memcpy() -> None:
        for i, h in enumerate(parts):
            c0, c1 = split(COLS, i, GENERATORS)
            h[:] = full[:, c0:c1]

    def step() -> None:
        refs = [t.block.remote() for t in trainers]
        ray.get([g.pull.remote(refs) for g in generators])

    ops = {"memcpy": memcpy, "object store": step}
    for fn in ops.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in ops}
    print(f"ray {args.size >> 20} MiB: {args.runs} rounds", file=sys.stderr, flush=True)
    for _ in range(args.runs):
        for name, fn in ops.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    ray.shutdown()
    row = {}
    for name, ts in times.items():
        row[f"{name} ms"] = 1e3 * statistics.median(ts)
        row[f"{name} GB/s"] = args.size / statistics.median(ts) / 1e9
        row[f"{name} x"] = statistics.median(m / t for m, t in zip(times["memcpy"], ts))
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
