"""Actors for the resharding tests: trainers that publish blocks of a tensor, readers that
pull their own block of it in another layout."""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from regency.actor import Actor, current_rank, endpoint
from regency.rdma import Block, TensorShard, reshard_into

T = 30


def full_tensor(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """The global tensor every test checks against (float32, reproducible)."""
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def layout_block(shape: tuple[int, ...], splits: dict[str, int]) -> Block:
    """This rank's block: tensor dim ``splits[mesh_dim]`` split along each named mesh dim."""
    point = current_rank()
    block = Block.whole(shape)
    for mesh_dim, tensor_dim in splits.items():
        block = block.split(tensor_dim, point[mesh_dim], point.size(mesh_dim))
    return block


class Owner(Actor):
    """Holds its block of the global tensor (a numpy array, or a torch tensor with
    ``as_torch``) and publishes it."""

    def __init__(self, shape: tuple[int, ...], splits: dict[str, int], seed: int = 0,
                 as_torch: bool = False) -> None:
        self.block = layout_block(shape, splits)
        self.data: Any = np.ascontiguousarray(full_tensor(shape, seed)[self.block.slices])
        if as_torch:
            import torch

            self.data = torch.from_numpy(self.data)
        self.shard = TensorShard(self.data, self.block, shape)
        self.stop = threading.Event()

    @endpoint
    def publish(self) -> TensorShard:
        return self.shard

    @endpoint
    def step(self, add: float = 1.0) -> int:
        with self.shard.updating():
            self.data += add
        return self.shard.version

    @endpoint
    def publish_version(self, version: int) -> int:
        with self.shard.updating(version):
            pass
        return self.shard.version

    @endpoint
    def churn(self, times: int) -> int:
        """Set the block to ``v`` at every version ``v``, as fast as it can."""
        for _ in range(times):
            with self.shard.updating():
                self.data[...] = float(self.shard.version + 1)
        return self.shard.version

    @endpoint
    def drop(self) -> None:
        self.shard.drop()


class Reader(Actor):
    """Pulls its block, in its own layout, from the owners' shards."""

    @endpoint
    def pull(self, shards: Any, shape: tuple[int, ...], splits: dict[str, int],
             version: int | None = None, timeout: float = T, as_torch: bool = False,
             transport: str | None = None) -> tuple[int, np.ndarray]:
        block = layout_block(shape, splits)
        dst: Any = np.zeros(block.shape, dtype=np.float32)
        if as_torch:
            import torch

            dst = torch.from_numpy(dst)
        if transport is not None:
            os.environ["REGENCY_RDMA_TRANSPORT"] = transport
        try:
            got = reshard_into(shards, dst, block, version=version, timeout=timeout).get()
        finally:
            os.environ.pop("REGENCY_RDMA_TRANSPORT", None)
        return got, np.asarray(dst)

    @endpoint
    def pull_many(self, shards: Any, shape: tuple[int, ...], times: int) -> list[str]:
        """Pull the whole tensor ``times`` times; say what was wrong with any pull."""
        dst = np.zeros(shape, dtype=np.float32)
        wrong = []
        for _ in range(times):
            version = reshard_into(shards, dst, Block.whole(shape)).get()
            if not (dst == float(version)).all() and version > 0:
                wrong.append(f"version {version}: values {sorted(set(dst.ravel()))[:4]}")
        return wrong

    @endpoint
    def error(self, shards: Any, shape: tuple[int, ...], **kw: Any) -> str:
        try:
            reshard_into(shards, np.zeros(shape, dtype=np.float32), Block.whole(shape),
                         **kw).get()
        except Exception as exc:  # the test checks the type and text
            return f"{type(exc).__name__}: {exc}"
        return "no error"
