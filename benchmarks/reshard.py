"""Resharding benchmark: a tensor in 4 row blocks on one mesh, pulled as 2 column blocks by
another mesh (the weight sync of RL post-training when trainer and generator shard
differently).

A *trainer* mesh of 4 procs holds a float32 tensor of ``--sizes`` bytes in total, split by
rows; a *generator* mesh of 2 procs needs it split by columns. One step is the controller
calling ``pull`` on the generators and waiting for both. Ways to do it:

* ``reshard`` (regency): ``reshard_into(shards, dst, block)``, which reads from each shard
  only the part its block needs (here, on one host, each row's part straight into place:
  4,096 ranges per shard at 256 MiB, 1,022 per ``process_vm_readv``);
* ``whole``: what a user writes with plain ``RDMABuffer``s, in regency or Monarch: read all
  4 shards whole into scratch buffers, then copy the needed columns out;
* Ray (``reshard_ray.py``, ``--ray``): the trainers return their blocks through the object
  store; the generators ``ray.get`` all 4 and copy the columns out.

The reference, run in the same rounds: ``memcpy``, both column halves copied out of a full
local array in one process (the strided copy any layout change costs at least). Figures are
medians over rounds after one warm-up: ms per step and GB/s of the tensor's size, and in
brackets the median per-round ratio of the reference's time to the way's.

Run from the repository root::

    .venv/bin/python benchmarks/reshard.py                      # 64 MiB and 256 MiB
    .venv/bin/python benchmarks/reshard.py --sizes 64M --runs 9 --monarch --ray

Monarch's figures come from this file run again under ``.bench-venvs/monarch`` with
``RESHARD_BENCH_FRAMEWORK=monarch`` (``benchmarks/setup_peers.sh``). It prints a markdown
table on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # shared with the Ray side's venv
from _reshard_common import COLS, GENERATORS, TRAINERS, reference, split, timed  # noqa: E402

FRAMEWORK = os.environ.get("RESHARD_BENCH_FRAMEWORK", "regency")
_actor = importlib.import_module(f"{FRAMEWORK}.actor")
_rdma = importlib.import_module(f"{FRAMEWORK}.rdma")
Actor: Any = _actor.Actor
endpoint, this_host, current_rank = _actor.endpoint, _actor.this_host, _actor.current_rank
VENVS = Path(__file__).resolve().parents[1] / ".bench-venvs"
RAY_SCRIPT = Path(__file__).resolve().with_name("reshard_ray.py")


def as_bytes(a: np.ndarray) -> Any:
    """What this framework's ``RDMABuffer`` registers: Monarch takes tensors only."""
    flat = a.reshape(-1).view(np.uint8)
    if FRAMEWORK == "monarch":
        import torch

        return torch.from_numpy(flat)
    return flat


class Trainer(Actor):
    """Holds rows ``split(rows, rank, 4)`` of the tensor."""

    def __init__(self, rows: int) -> None:
        lo, hi = split(rows, current_rank().rank, TRAINERS)
        self.rows = (lo, hi)
        self.data = np.full((hi - lo, COLS), current_rank().rank + 1, dtype=np.float32)
        self.buffer = _rdma.RDMABuffer(as_bytes(self.data))
        self.shard = (_rdma.TensorShard(self.data, _rdma.Block((lo, 0), self.data.shape),
                                        (rows, COLS)) if FRAMEWORK == "regency" else None)

    @endpoint
    def handles(self) -> tuple[tuple[int, int], Any, Any]:
        return self.rows, self.buffer, self.shard


class Generator(Actor):
    """Needs columns ``split(COLS, rank, 2)`` of every row."""

    def __init__(self, rows: int) -> None:
        self.cols = split(COLS, current_rank().rank, GENERATORS)
        self.dst = np.zeros((rows, self.cols[1] - self.cols[0]), dtype=np.float32)
        self.scratch: list[np.ndarray] = []

    @endpoint
    def pull_whole(self, handles: list[Any]) -> float:
        """Every shard read whole, then the columns copied out."""
        if not self.scratch:
            self.scratch = [np.ones((hi - lo, COLS), dtype=np.float32)
                            for (lo, hi), _, _ in handles]
        for s, (_, buf, _) in zip(self.scratch, handles, strict=True):
            buf.read_into(as_bytes(s), timeout=300).get()
        c0, c1 = self.cols
        for s, ((lo, hi), _, _) in zip(self.scratch, handles, strict=True):
            self.dst[lo:hi] = s[:, c0:c1]
        return float(self.dst[0, 0])

    @endpoint
    def pull_reshard(self, handles: list[Any]) -> float:
        shards = [shard for _, _, shard in handles]
        block = _rdma.Block((0, self.cols[0]), self.dst.shape)
        _rdma.reshard_into(shards, self.dst, block, timeout=300).get()
        return float(self.dst[0, 0])


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def measure(nbytes: int, runs: int) -> dict[str, float]:
    """ms per step of each way, with the reference interleaved, and each one's ratio."""
    rows = nbytes // (4 * COLS)
    host = this_host()
    tp = host.spawn_procs(per_host={"gpus": TRAINERS})
    gp = host.spawn_procs(per_host={"gpus": GENERATORS})
    trainers = tp.spawn("trainer", Trainer, rows)
    generators = gp.spawn("generator", Generator, rows)
    handles = list(trainers.handles.call().get().values())
    ops: dict[str, Any] = {"memcpy": reference(rows),
                           "whole": lambda: generators.pull_whole.call(handles).get()}
    if FRAMEWORK == "regency":
        ops["reshard"] = lambda: generators.pull_reshard.call(handles).get()
    row = timed(f"{FRAMEWORK} {nbytes >> 20} MiB", ops, runs, nbytes)
    tp.stop().get()
    gp.stop().get()
    return row


def peer_row(python: Path, cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    if not python.exists():
        raise SystemExit(f"no peer venv at {python}: run benchmarks/setup_peers.sh")
    out = subprocess.run([str(python), *cmd], env=env, stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="64M,256M")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--monarch", action="store_true")
    ap.add_argument("--ray", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.child:  # a peer's run: one size, its row as JSON
        print(json.dumps(measure(sizes[0], args.runs)))
        return 0
    lines = ["| size | way | ms per step | GB/s | x memcpy (same rounds) |",
             "|---|---|---|---|---|"]
    for n in sizes:
        rows = {FRAMEWORK: measure(n, args.runs)}
        if args.monarch:
            rows["monarch"] = peer_row(
                VENVS / "monarch/bin/python", [__file__, "--child", "--sizes", str(n),
                                               "--runs", str(args.runs)],
                {**os.environ, "RESHARD_BENCH_FRAMEWORK": "monarch",  # its procs import the
                 "PYTHONPATH": os.pathsep.join(  # shared module by name, as this does
                     [str(Path(__file__).resolve().parent),
                      *filter(None, [os.environ.get("PYTHONPATH")])])})
        if args.ray:
            rows["ray"] = peer_row(VENVS / "ray/bin/python",
                                   [str(RAY_SCRIPT), "--size", str(n), "--runs",
                                    str(args.runs)], dict(os.environ))
        for who, row in rows.items():
            for way in [k.removesuffix(" ms") for k in row if k.endswith(" ms")]:
                lines.append(f"| {n >> 20} MiB | {who} {way} | {row[f'{way} ms']:.1f} | "
                             f"{row[f'{way} GB/s']:.2f} | {row[f'{way} x']:.2f} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
