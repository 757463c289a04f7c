"""What ``reshard.py`` and ``reshard_ray.py`` share (numpy only: the Ray side runs in Ray's
own venv, without regency): the layout, the reference copy, and timing the ways in the same
rounds."""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable

import numpy as np

from _common import interleave

COLS = 4096
TRAINERS = 4
GENERATORS = int(os.environ.get("RESHARD_BENCH_GENERATORS", "2"))


def split(size: int, index: int, parts: int) -> tuple[int, int]:
    """Near-equal part ``index`` of ``range(size)`` (as ``numpy.array_split``)."""
    small, extra = divmod(size, parts)
    start = index * small + min(index, extra)
    return start, start + small + (1 if index < extra else 0)


def reference(rows: int) -> Callable[[], None]:
    """The layout change in one process: every generator's columns copied out of a full
    local array (the strided copy any layout change costs at least)."""
    full = np.ones((rows, COLS), dtype=np.float32)
    parts = [np.zeros((rows, COLS // GENERATORS), dtype=np.float32)
             for _ in range(GENERATORS)]

    def memcpy() -> None:
        for i, h in enumerate(parts):
            c0, c1 = split(COLS, i, GENERATORS)
            h[:] = full[:, c0:c1]

    return memcpy


def timed(label: str, ops: dict[str, Callable[[], object]], runs: int,
          nbytes: int) -> dict[str, float]:
    """Run ``ops`` once each (warm-up), then ``runs`` rounds of all, interleaved; ms per op,
    GB/s of ``nbytes``, and the median per-round ratio of ``ops["memcpy"]``'s time."""
    print(f"{label}: {runs} rounds of {', '.join(ops)}", file=sys.stderr, flush=True)
    times = interleave(ops, runs)  # the warm-up: connections, page tables, plans
    row = {}
    for name, ts in times.items():
        row[f"{name} ms"] = 1e3 * statistics.median(ts)
        row[f"{name} GB/s"] = nbytes / statistics.median(ts) / 1e9
        row[f"{name} x"] = statistics.median(m / t for m, t in zip(times["memcpy"], ts))
    return row
