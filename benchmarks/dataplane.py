"""Data-plane benchmark: RDMABuffer read_into / write_from per transport vs a plain memcpy.

One proc owns a buffer (``numpy.ones``, pages touched); the controller reads it into, and
writes it from, a preallocated, touched local array of the same size, forcing each transport
in turn. The reference is ``numpy.copyto`` between two touched arrays of the same size in one
process: the physical limit of a single-copy transfer on this machine, run in the same
rounds (interleaved) so that drifting memory bandwidth affects both alike. Each figure is
the median of several rounds after one warm-up, in GB/s (10^9 bytes per second).

Run from the repository root::

    .venv/bin/python benchmarks/dataplane.py                       # 1 MiB, 64 MiB, 1 GiB
    .venv/bin/python benchmarks/dataplane.py --sizes 1M,64M --transports vm,tcp --runs 9

With ``--monarch`` the same measurement also runs under Monarch (``torchmonarch`` in
``.bench-venvs/monarch``, see ``benchmarks/setup_peers.sh``), in a subprocess that runs this
very file with ``DATAPLANE_BENCH_FRAMEWORK=monarch``; its transport is whatever Monarch picks
(its TCP fallback on machines without ibverbs).

With ``--ray`` it also runs ``benchmarks/dataplane_ray.py`` in a subprocess under
``.bench-venvs/ray`` (same setup script): Ray has no one-sided buffer, so its columns go
through the object store on one node (the owner actor returns, or receives, the array; the
reader copies it into its own).
Both flags may be combined::

    .venv/bin/python benchmarks/dataplane.py --sizes 64M --transports vm --monarch --ray

It prints a markdown table on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

FRAMEWORK = os.environ.get("DATAPLANE_BENCH_FRAMEWORK", "regency")
_actor = importlib.import_module(f"{FRAMEWORK}.actor")
RDMABuffer = importlib.import_module(f"{FRAMEWORK}.rdma").RDMABuffer
Actor: Any = _actor.Actor  # regency's or Monarch's, chosen at run time
endpoint, this_host = _actor.endpoint, _actor.this_host

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
VENVS = Path(__file__).resolve().parents[1] / ".bench-venvs"
MONARCH_PYTHON = VENVS / "monarch/bin/python"
RAY_PYTHON = VENVS / "ray/bin/python"
RAY_SCRIPT = Path(__file__).resolve().with_name("dataplane_ray.py")
Rows = list[tuple[int, int, dict[str, float]]]


def new_array(nbytes: int) -> Any:
    """Touched memory of ``nbytes``: numpy for regency, a torch tensor for Monarch (which
    registers only tensors and memoryviews)."""
    if FRAMEWORK == "monarch":
        import torch

        return torch.ones(nbytes, dtype=torch.uint8)
    return np.ones(nbytes, dtype=np.uint8)


class Owner(Actor):
    """Owns one buffer at a time."""

    def __init__(self) -> None:
        self.buf: Any = None
        self.data: Any = None

    @endpoint
    def make(self, nbytes: int) -> Any:
        self._release()
        self.data = new_array(nbytes)
        self.buf = RDMABuffer(self.data)
        return self.buf

    @endpoint
    def free(self) -> None:
        self._release()

    def _release(self) -> None:
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1M,64M,1G")
    ap.add_argument("--transports", default="vm,unix,tcp")
    ap.add_argument("--runs", type=int, default=None, help="runs per figure (default by size)")
    ap.add_argument("--monarch", action="store_true", help="add Monarch's figures (subprocess)")
    ap.add_argument("--ray", action="store_true", help="add Ray's figures (subprocess)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if args.child:  # under Monarch: one default transport, JSON out
        transports = ["default"]
    rows = run(sizes, args.runs, transports)
    if args.child:
        print(json.dumps([[n, r, row] for n, r, row in rows]))
        return 0
    if args.monarch:
        merge(rows, monarch_rows(args.sizes, args.runs), "monarch")
        transports.append("monarch")
    if args.ray:
        merge(rows, ray_rows(sizes, args.runs), "ray")
        transports.append("ray")
    print(table(rows, transports))
    return 0


def run(sizes: list[int], runs: int | None, transports: list[str]) -> Rows:
    procs = this_host().spawn_procs(per_host={"procs": 1}, name="dataplane-bench")
    owner = procs.spawn("owner", Owner).slice(procs=0)
    try:
        return [(n, runs_for(n, runs), measure(owner, n, runs_for(n, runs), transports))
                for n in sizes]
    finally:
        procs.stop().get()


def merge(rows: Rows, theirs: Rows, name: str) -> None:
    """Add a peer's read/write figures (its "default" transport) to ``rows`` as ``name``."""
    for (_, _, row), (_, _, peer) in zip(rows, theirs):
        for op in ("read", "write"):
            row[f"{name} {op}"] = peer[f"default {op}"]
            row[f"{name} {op} %"] = peer[f"default {op} %"]


def monarch_rows(sizes: str, runs: int | None) -> Rows:
    """The same measurement under Monarch, in its own venv."""
    if not MONARCH_PYTHON.exists():
        raise SystemExit(f"no Monarch venv at {MONARCH_PYTHON}: run benchmarks/setup_peers.sh")
    cmd = [str(MONARCH_PYTHON), __file__, "--child", "--sizes", sizes]
    if runs is not None:
        cmd += ["--runs", str(runs)]
    env = {**os.environ, "DATAPLANE_BENCH_FRAMEWORK": "monarch"}
    print("monarch: running in a subprocess", file=sys.stderr, flush=True)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return parse_rows(out)


def ray_rows(sizes: list[int], runs: int | None) -> Rows:
    """Ray's nearest equivalent (object store), by ``dataplane_ray.py`` in Ray's venv."""
    if not RAY_PYTHON.exists():
        raise SystemExit(f"no Ray venv at {RAY_PYTHON}: run benchmarks/setup_peers.sh ray")
    cmd = [str(RAY_PYTHON), str(RAY_SCRIPT), "--sizes", ",".join(map(str, sizes)),
           "--runs", ",".join(str(runs_for(n, runs)) for n in sizes)]
    print("ray: running in a subprocess", file=sys.stderr, flush=True)
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True).stdout
    return parse_rows(out)


def parse_rows(out: str) -> Rows:
    """The rows a child prints as JSON on its last stdout line."""
    return [(int(n), int(r), dict(row)) for n, r, row in json.loads(out.strip().splitlines()[-1])]


def measure(owner: Any, n: int, runs: int, transports: list[str]) -> dict[str, float]:
    """GB/s of memcpy and of each transport's read and write, for ``n`` bytes.

    The operations are interleaved, one of each per round, so that a machine whose memory
    bandwidth drifts (shared VMs) affects them alike; the percentage of an operation is the
    median over rounds of memcpy's time divided by its time in the same round.
    """
    dst = np.zeros(n, dtype=np.uint8)
    dst[:] = 2  # touch every page
    src = np.ones_like(dst)
    buf = owner.make.call_one(n).get()
    local: Any = dst
    if FRAMEWORK == "monarch":
        import torch

        local = torch.from_numpy(dst)
    ops: dict[str, Any] = {"memcpy": lambda: np.copyto(dst, src)}
    for t in transports:
        kw = {} if t == "default" else {"transport": t}
        ops[f"{t} read"] = lambda kw=kw: buf.read_into(local, timeout=300, **kw).get()
        ops[f"{t} write"] = lambda kw=kw: buf.write_from(local, timeout=300, **kw).get()
    print(f"{FRAMEWORK} {label(n)}: {runs} rounds of {', '.join(ops)}", file=sys.stderr,
          flush=True)
    times: dict[str, list[float]] = {name: [] for name in ops}
    for fn in ops.values():
        fn()  # warm-up: connections, page tables
    for _ in range(runs):
        for name, fn in ops.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    owner.free.call_one().get()
    row = {name: n / statistics.median(ts) / 1e9 for name, ts in times.items()}
    for name, ts in times.items():
        row[f"{name} %"] = 100 * statistics.median(
            m / t for m, t in zip(times["memcpy"], ts))
    return row


def table(rows: Rows, transports: list[str]) -> str:
    cols = ["memcpy"] + [f"{t} {d}" for t in transports for d in ("read", "write")]
    head = "| size | runs | " + " | ".join(cols) + " |"
    sep = "|" + "---|" * (len(cols) + 2)
    lines = [head, sep]
    for n, runs, row in rows:
        cells = [f"{row['memcpy']:.2f}"]
        for c in cols[1:]:
            cells.append(f"{row[c]:.2f} ({row[c + ' %']:.0f}%)")
        lines.append(f"| {label(n)} | {runs} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("GB/s, median of `runs` rounds after a warm-up; (%): median over rounds of "
                 "memcpy's time / this time, memcpy of the same size run in the same round. "
                 "Reader: the controller; owner: one proc on the same host.")
    if "monarch" in transports:
        lines.append("monarch: torchmonarch with the transport it picks here (TCP fallback "
                     "without ibverbs), torch uint8 tensors.")
    if "ray" in transports:
        lines.append("ray: no one-sided buffer; through the object store on one node: read = "
                     "the owner actor returns its array, the reader copies it into its own; "
                     "write = the owner receives the array and copies it into its own.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
