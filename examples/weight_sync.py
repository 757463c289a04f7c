"""Weight sync, the pattern of RL post-training: trainers publish, generators pull.

A *trainer* mesh holds the model, sharded by layer across its ranks, and updates it in place
every step. A *generator* mesh (the inference side of RL) needs a fresh copy of all the
weights after each step. Sending the weights as endpoint arguments would pickle and push
every byte through the controller's messages each time. Instead:

1. each trainer registers its parameters once, ``RDMABuffer(param)``, and publishes the
   handles (small picklable values) through an ordinary endpoint call;
2. the controller hands all the handles to every generator (a few hundred bytes each);
3. after each training step, every generator *pulls* the new weights one-sidedly with
   ``handle.read_into(local_param)``: the trainers' actor code does not run, and the bytes
   go straight from trainer memory to generator memory (one copy on one host).

The controller orders the phases (train, then sync), so a generator never reads a layer
while a trainer writes it. Run it with ``.venv/bin/python examples/weight_sync.py``.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np

from regency.actor import Actor, current_rank, current_size, endpoint, this_host
from regency.rdma import RDMAAction, RDMABuffer


def model_layout(layers: int, mib_per_layer: float) -> dict[str, tuple[int, int]]:
    """Layer name -> shape of a float32 weight matrix."""
    cols = 1024
    rows = max(1, int(mib_per_layer * (1 << 20)) // (4 * cols))
    return {f"layer{i}.weight": (rows, cols) for i in range(layers)}


def checksum(params: dict[str, np.ndarray]) -> dict[str, float]:
    return {name: float(p.sum(dtype=np.float64)) for name, p in sorted(params.items())}


class Trainer(Actor):
    """One rank of the trainer mesh: owns the layers ``i % size == rank``."""

    def __init__(self, layout: dict[str, tuple[int, int]]) -> None:
        rank, size = current_rank().rank, math.prod(current_size().values())
        mine = [name for i, name in enumerate(layout) if i % size == rank]
        rng = np.random.default_rng(rank)
        self.params = {n: rng.standard_normal(layout[n], dtype=np.float32) for n in mine}
        self.handles: dict[str, RDMABuffer] | None = None
        self.step = 0

    @endpoint
    def publish(self) -> dict[str, RDMABuffer]:
        """Register the parameters (once) and return their handles."""
        if self.handles is None:
            # reshape(-1) of a contiguous array is a 1-D view of the same memory
            self.handles = {n: RDMABuffer(p.reshape(-1)) for n, p in self.params.items()}
        return self.handles

    @endpoint
    def train_step(self) -> int:
        """Update the weights in place (a stand-in for an optimizer step)."""
        self.step += 1
        for p in self.params.values():
            p *= np.float32(0.99)
            p += np.float32(0.01 * self.step)
        return self.step

    @endpoint
    def checksums(self) -> dict[str, float]:
        return checksum(self.params)

    @endpoint
    def unpublish(self) -> None:
        for h in (self.handles or {}).values():
            h.drop().get()
        self.handles = None


class Generator(Actor):
    """One rank of the generator mesh: a full copy of the weights, refreshed by pulling."""

    def __init__(self, layout: dict[str, tuple[int, int]]) -> None:
        self.params = {n: np.zeros(shape, dtype=np.float32) for n, shape in layout.items()}

    @endpoint
    def sync(self, handles: dict[str, RDMABuffer]) -> dict[str, float]:
        """Pull every layer, all at once, from whichever trainer owns it."""
        start = time.perf_counter()
        action = RDMAAction()
        for name, handle in handles.items():
            action.read_remote(self.params[name], handle)
        action.submit().get()
        took = time.perf_counter() - start
        nbytes = sum(h.size() for h in handles.values())
        return {"bytes": nbytes, "seconds": took, "gbps": nbytes / took / 1e9}

    @endpoint
    def checksums(self) -> dict[str, float]:
        return checksum(self.params)

    @endpoint
    def transport(self, handle: RDMABuffer) -> str:
        """How this generator reaches ``handle``'s owner, and why."""
        return str(handle.transport_for())

    @endpoint
    def generate(self, seed: int) -> float:
        """A stand-in for sampling with the current weights."""
        x = np.random.default_rng(seed).standard_normal(1024, dtype=np.float32)
        return float(sum(float((p @ x).sum()) for p in self.params.values()))


def main(trainers: int = 2, generators: int = 2, layers: int = 4, mib_per_layer: float = 16,
         steps: int = 3, quiet: bool = False) -> list[dict[str, Any]]:
    """Run ``steps`` train-then-sync rounds; returns one record per step."""
    say = (lambda *a: None) if quiet else print
    layout = model_layout(layers, mib_per_layer)
    host = this_host()
    tprocs = host.spawn_procs(per_host={"trainers": trainers}, name="trainers")
    gprocs = host.spawn_procs(per_host={"generators": generators}, name="generators")
    trainer = tprocs.spawn("trainer", Trainer, layout)
    generator = gprocs.spawn("generator", Generator, layout)
    records = []
    try:
        handles: dict[str, RDMABuffer] = {}
        for _, published in trainer.publish.call().get().items():
            handles.update(published)
        first = next(iter(handles.values()))
        how = generator.slice(generators=0).transport.call_one(first).get()
        say(f"{len(handles)} layers published by {trainers} trainers "
            f"({sum(h.size() for h in handles.values()) / 2**20:.0f} MiB)")
        say(f"generator 0 pulls them over {how}")
        for _ in range(steps):
            step = max(trainer.train_step.call().get().values())
            stats = generator.sync.call(handles).get()
            want: dict[str, float] = {}
            for _, sums in trainer.checksums.call().get().items():
                want.update(sums)
            got = generator.checksums.call().get()
            in_sync = all(sums == dict(sorted(want.items())) for _, sums in got.items())
            rate = min(s["gbps"] for _, s in stats.items())
            say(f"step {step}: generators in sync: {in_sync}; slowest pull {rate:.2f} GB/s")
            records.append({"step": step, "in_sync": in_sync, "gbps": rate})
        trainer.unpublish.call().get()
    finally:
        gprocs.stop().get()
        tprocs.stop().get()
    return records


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="trainers publish weights, generators pull them")
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--generators", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--mib-per-layer", type=float, default=16)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    main(a.trainers, a.generators, a.layers, a.mib_per_layer, a.steps)
