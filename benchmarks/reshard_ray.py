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
import sys
from typing import Any

import numpy as np
import ray

from _reshard_common import COLS, GENERATORS, TRAINERS, reference, split, timed


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

    def step() -> None:
        refs = [t.block.remote() for t in trainers]
        ray.get([g.pull.remote(refs) for g in generators])

    row = timed(f"ray {args.size >> 20} MiB", {"memcpy": reference(rows),
                                               "object store": step}, args.runs, args.size)
    ray.shutdown()
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
