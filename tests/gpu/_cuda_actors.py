"""Actors for the CUDA data-plane tests (importable, so procs unpickle them by reference).

Torch is imported inside the methods: the procs import it only when a CUDA test runs."""

from __future__ import annotations

import os
from typing import Any

from regency.actor import Actor, endpoint
from regency.rdma import RDMABuffer


def ramp_tensor(n: int, seed: int, device: str) -> Any:
    """``(i * 7 + seed) % 251`` as uint8, made on ``device``."""
    import torch

    return ((torch.arange(n, device=device, dtype=torch.int64) * 7 + seed) % 251).to(
        torch.uint8)


class CudaPeer(Actor):
    """Owns CUDA or CPU buffers by name, reads and writes others', echoes tensors."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.data: dict[str, Any] = {}
        self.bufs: dict[str, RDMABuffer] = {}

    @endpoint
    def make(self, name: str, n: int, seed: int, device: str) -> RDMABuffer:
        t = ramp_tensor(n, seed, device)
        self.data[name] = t
        self.bufs[name] = RDMABuffer(t)
        return self.bufs[name]

    @endpoint
    def checksum(self, name: str) -> int:
        return int(self.data[name].to(self.torch.int64).sum().item())

    @endpoint
    def read(self, buf: RDMABuffer, device: str, transport: str | None = None) -> tuple[int, str]:
        dst = self.torch.zeros(buf.size(), dtype=self.torch.uint8, device=device)
        buf.read_into(dst, transport=transport).get(timeout=60)
        return int(dst.to(self.torch.int64).sum().item()), buf.transport_for().name

    @endpoint
    def write(self, buf: RDMABuffer, n: int, seed: int, device: str,
              transport: str | None = None) -> None:
        buf.write_from(ramp_tensor(n, seed, device), transport=transport).get(timeout=60)

    @endpoint
    def drop(self, name: str) -> None:
        self.bufs.pop(name).drop().get(timeout=30)
        del self.data[name]
        self.torch.cuda.synchronize()

    @endpoint
    def echo(self, t: Any) -> Any:
        return t

    @endpoint
    def describe(self, t: Any) -> tuple[str, tuple[int, ...], tuple[int, ...], str, int, bool]:
        return (str(t.device), tuple(t.shape), tuple(t.stride()), str(t.dtype),
                int(t.to(self.torch.float64).sum().item()), bool(t.requires_grad))

    @endpoint
    def keep_and_bump(self, t: Any) -> None:
        self.data["kept"] = t
        t.add_(1)  # private: the sender must not see this

    @endpoint
    def lends(self) -> int:
        from regency._dataplane._registry import peek

        reg = peek()
        return reg.lends() if reg is not None else 0

    @endpoint
    def allocated(self) -> int:
        self.torch.cuda.synchronize()
        return int(self.torch.cuda.memory_allocated())

    @endpoint
    def free_bytes(self) -> int:
        return int(self.torch.cuda.mem_get_info()[0])

    @endpoint
    def mappings(self, owner: str | None = None) -> int:
        from regency._dataplane import _cuda

        return _cuda.mapping_count(owner)

    @endpoint
    def pid(self) -> int:
        return os.getpid()


class ShardHolder(Actor):
    """Holds rows ``rank of 4`` of a ``(64, 96)`` float32 ramp on ``device`` as a TensorShard
    (regency.rdma.reshard_into's source), and reads its own column block of it."""

    SHAPE = (64, 96)

    def __init__(self, device: str) -> None:
        import torch

        from regency.actor import current_rank
        from regency.rdma import Block, TensorShard

        self.torch = torch
        rank = current_rank()
        self.block = Block.whole(self.SHAPE).split(0, rank.rank, rank.size("gpus"))
        full = torch.arange(64 * 96, dtype=torch.float32).reshape(self.SHAPE)
        self.data = full[self.block.slices].contiguous().to(device)
        self.shard = TensorShard(self.data, self.block, self.SHAPE)

    @endpoint
    def publish(self) -> Any:
        return self.shard

    @endpoint
    def bump(self) -> int:
        with self.shard.updating():
            self.data += 1000  # queued on the GPU: updating() waits for it before publishing
        return self.shard.version

    @endpoint
    def pull(self, shards: Any, index: int, parts: int, device: str) -> tuple[int, float]:
        """Columns ``index of parts``; returns the version and the largest error."""
        from regency.rdma import Block, reshard_into

        block = Block.whole(self.SHAPE).split(1, index, parts)
        torch = self.torch
        full = torch.arange(64 * 96, dtype=torch.float32).reshape(self.SHAPE)
        dst = torch.zeros(block.shape, dtype=torch.float32, device=device)
        version = reshard_into(shards, dst, block).get(timeout=60)
        want = full[block.slices] + 1000 * version
        return version, float((dst.cpu() - want).abs().max().item())
