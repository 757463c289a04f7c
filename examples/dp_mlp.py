"""Data-parallel training of a small MLP on a {hosts: 2, gpus: 2} mesh, checked against one process.

Run it with `python examples/dp_mlp.py` (needs torch: `pip install "regency[torch]"`).

The controller (this script) spawns 4 procs and, inside `with procs.activate():`, writes
ordinary torch code: build a model, take a batch, compute a loss, backward, step. Each line
runs on all 4 procs at once. Each proc trains on its own quarter of one fixed synthetic data
set; after backward the gradients are averaged over the whole mesh with `reduce_`, so every
proc takes the same SGD step — the one a single process training on all of the data takes.
At the end the loss is fetched from one proc and printed next to the loss of that single
process (plain torch, no mesh); they agree to 1e-5.

docs/tensors.md ("Example: data-parallel training") walks through it step by step.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from torch import nn

from regency import fetch_shard, reduce, reduce_
from regency.actor import this_host

SAMPLES = 64  # the whole data set; every proc takes SAMPLES / world of it
FEATURES = 8
HIDDEN = 16
LR = 0.1
STEPS = 20
TOLERANCE = 1e-5


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed synthetic regression data set, computed from formulas (no random numbers):
    the same tensors whether it runs locally or on every proc of a mesh."""
    grid = torch.arange(SAMPLES * FEATURES, dtype=torch.float32).reshape(SAMPLES, FEATURES)
    x = torch.sin(grid * 0.37)
    w = torch.linspace(-1.0, 1.0, FEATURES).reshape(FEATURES, 1)
    y = torch.tanh(x @ w) + 0.1 * torch.cos(grid[:, :1])
    return x, y


def model() -> nn.Module:
    """The MLP, its weights set from a formula so that every copy starts the same (the
    default random init would differ from proc to proc)."""
    mlp = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    with torch.no_grad():
        for i, p in enumerate(mlp.parameters()):
            n = p.numel()
            p.copy_(torch.sin(torch.arange(n, dtype=torch.float32) * 0.7 + i).reshape(p.shape)
                    / n ** 0.5)
    return mlp


def train(mlp: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int,
          average: Any = None) -> torch.Tensor:
    """`steps` of full-batch SGD on (x, y); `average(grad)` averages each gradient over the
    data-parallel ranks (None in a single process). The last step's loss."""
    opt = torch.optim.SGD(mlp.parameters(), lr=LR)
    loss = torch.zeros(())
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(mlp(x), y)
        loss.backward()
        if average is not None:
            for p in mlp.parameters():
                average(p.grad)
        opt.step()
    return loss.detach()


def single_process(steps: int) -> float:
    """The reference: the same training on all the data in this process, plain torch."""
    x, y = dataset()
    mlp = model()
    train(mlp, x, y, steps)
    with torch.no_grad():
        return float(nn.functional.mse_loss(mlp(x), y))


def data_parallel(steps: int, per_host: dict[str, int] | None = None) -> float:
    """The same training on a proc mesh, each proc on its shard; the final loss, fetched."""
    procs = this_host().spawn_procs(per_host=per_host or {"hosts": 2, "gpus": 2})
    dims = tuple(procs.sizes)  # ("hosts", "gpus"): gradients are averaged over both
    world = procs.size()
    try:
        with procs.activate():
            x, y = dataset()  # every proc computes the whole (small) data set ...
            rank = procs.rank_tensor(dims)  # ... 0..world-1, one value per proc
            shard = SAMPLES // world  # ... and keeps its own rows
            x = x.reshape(world, shard, FEATURES)[rank]
            y = y.reshape(world, shard, 1)[rank]
            mlp = model()
            train(mlp, x, y, steps, average=lambda g: reduce_(g, dims, "avg"))
            with torch.no_grad():
                loss = reduce(nn.functional.mse_loss(mlp(x), y), dims, "avg")
        return float(fetch_shard(loss, dict.fromkeys(dims, 0)).get(timeout=120))
    finally:
        procs.stop().get(timeout=60)


def main(steps: int = STEPS) -> tuple[float, float]:
    """Train both ways and print the two losses; returns (mesh loss, single-process loss)."""
    mesh_loss = data_parallel(steps)
    local_loss = single_process(steps)
    diff = abs(mesh_loss - local_loss)
    print(f"loss after {steps} steps on a hosts=2 x gpus=2 mesh: {mesh_loss:.7f}")
    print(f"loss after {steps} steps in a single process:       {local_loss:.7f}")
    print(f"difference {diff:.2e} ({'within' if diff <= TOLERANCE else 'NOT within'} "
          f"{TOLERANCE:g})")
    return mesh_loss, local_loss


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    main(parser.parse_args().steps)
