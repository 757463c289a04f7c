"""Ray's side of ``dataplane.py --ray``: the nearest Ray equivalent of RDMABuffer transfers.

Ray has no one-sided buffer, so both directions go through its shared-memory object store
on one node. A Ray actor ``Owner`` holds a touched numpy uint8 array of ``n`` bytes, like
the regency owner; the driver holds touched ``dst`` and ``src`` arrays of the same size.

* read: ``np.copyto(dst, ray.get(owner.data.remote()))``: the owner returns its array
  (Ray copies it into the object store), the driver maps it zero-copy and copies it into
  ``dst``.
* write: ``ray.get(owner.write.remote(src))``: Ray puts ``src`` into the object store, the
  owner maps it and copies it into its own array.

Each round also runs ``np.copyto(dst, src)`` (interleaved, as ``dataplane.measure`` does);
an operation's percentage is the median over rounds of memcpy's time divided by its time.
Run by ``dataplane.py --ray`` under ``.bench-venvs/ray/bin/python`` with the sizes in bytes
and the rounds per size already resolved::

    .bench-venvs/ray/bin/python benchmarks/dataplane_ray.py --sizes 1048576,67108864 --runs 30,9

Progress goes to stderr; the last stdout line is JSON ``[[n, runs, row], ...]`` with the keys
of the Monarch child ("memcpy", "default read", "default write" and each one's "... %").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import ray

from _common import interleave


@ray.remote(num_cpus=0)
class Owner:
    """Owns one touched array at a time (``buf``: a method named ``data`` serves it)."""

    def __init__(self) -> None:
        self.buf: Any = None

    def make(self, nbytes: int) -> None:
        self.buf = None
        self.buf = np.ones(nbytes, dtype=np.uint8)

    def data(self) -> Any:
        return self.buf

    def write(self, x: Any) -> None:
        np.copyto(self.buf, x)

    def free(self) -> None:
        self.buf = None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", required=True, help="comma-separated sizes in bytes")
    ap.add_argument("--runs", required=True, help="comma-separated rounds, one per size")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    runs = [int(r) for r in args.runs.split(",")]
    if len(runs) != len(sizes):
        raise SystemExit("--runs needs one count per size")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    try:
        owner = Owner.remote()  # type: ignore[attr-defined]
        rows = [[n, r, measure(owner, n, r)] for n, r in zip(sizes, runs)]
    finally:
        ray.shutdown()
    print(json.dumps(rows))
    return 0


def measure(owner: Any, n: int, runs: int) -> dict[str, float]:
    """GB/s of memcpy, ray read and ray write for ``n`` bytes, one of each per round."""
    dst = np.zeros(n, dtype=np.uint8)
    dst[:] = 2  # touch every page
    src = np.ones_like(dst)
    ray.get(owner.make.remote(n))
    ops: dict[str, Callable[[], object]] = {
        "memcpy": lambda: np.copyto(dst, src),
        "default read": lambda: np.copyto(dst, ray.get(owner.data.remote())),
        "default write": lambda: ray.get(owner.write.remote(src)),
    }
    print(f"ray {n / (1 << 20):g} MiB: {runs} rounds of {', '.join(ops)}", file=sys.stderr,
          flush=True)
    times = interleave(ops, runs)
    ray.get(owner.free.remote())
    row = {name: n / statistics.median(ts) / 1e9 for name, ts in times.items()}
    for name, ts in times.items():
        row[f"{name} %"] = 100 * statistics.median(m / t for m, t in zip(times["memcpy"], ts))
    return row


if __name__ == "__main__":
    sys.exit(main())
