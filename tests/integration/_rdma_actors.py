"""Actors for the data-plane tests (importable, so procs unpickle them by reference)."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np

from regency.actor import Actor, endpoint
from regency.rdma import RDMABuffer


def pattern(nbytes: int, seed: int) -> np.ndarray:
    """Deterministic bytes that differ for every seed and position."""
    return np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)


def digest(data: Any) -> str:
    return hashlib.sha256(memoryview(data).cast("B")).hexdigest()


def ramp(nbytes: int, seed: int) -> np.ndarray:
    """Cheap to make at 1 GiB: ``(i + seed) % 256``."""
    row = np.roll(np.arange(256, dtype=np.uint8), -seed)
    out = np.empty(nbytes, dtype=np.uint8)
    full = nbytes - nbytes % 256
    out[:full].reshape(-1, 256)[:] = row
    out[full:] = row[: nbytes - full]
    return out


def make_data(kind: str, nbytes: int, seed: int) -> Any:
    """Memory of one kind holding ``pattern(nbytes, seed)`` (``ramp`` for kind "ramp")."""
    if kind == "ramp":
        return ramp(nbytes, seed)
    arr = pattern(nbytes, seed)
    if kind == "numpy":
        return arr
    if kind == "float32":
        return arr[: nbytes - nbytes % 4].view(np.float32).copy()
    if kind == "bytearray":
        return bytearray(arr.tobytes())
    if kind == "memoryview":
        return memoryview(bytearray(arr.tobytes()))
    if kind == "bytes":
        return arr.tobytes()
    raise ValueError(kind)


class Holder(Actor):
    """Owns buffers (by name) and reads or writes other actors' buffers."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.bufs: dict[str, RDMABuffer] = {}

    @endpoint
    def make(self, name: str, kind: str, nbytes: int, seed: int) -> RDMABuffer:
        self.data[name] = make_data(kind, nbytes, seed)
        self.bufs[name] = RDMABuffer(self.data[name])
        return self.bufs[name]

    @endpoint
    def digest(self, name: str) -> str:
        return digest(self.data[name])

    @endpoint
    def peek(self, name: str, step: int) -> bytes:
        """Every ``step``-th byte of a buffer, and its last byte (cheap spot checks)."""
        data = np.frombuffer(memoryview(self.data[name]).cast("B"), dtype=np.uint8)
        return data[::step].tobytes() + data[-1:].tobytes()

    @endpoint
    def drop(self, name: str) -> None:
        self.bufs[name].drop().get(timeout=10)

    @endpoint
    def forget(self, name: str) -> None:
        self.bufs.pop(name, None)
        self.data.pop(name, None)

    @endpoint
    def read(self, handle: RDMABuffer, transport: str | None = None) -> str:
        dst = np.empty(handle.size(), dtype=np.uint8)
        handle.read_into(dst, transport=transport).get(timeout=30)
        return digest(dst)

    @endpoint
    def write(self, handle: RDMABuffer, nbytes: int, seed: int,
              transport: str | None = None) -> None:
        handle.write_from(pattern(nbytes, seed), transport=transport).get(timeout=30)

    @endpoint
    def transport(self, handle: RDMABuffer) -> tuple[str, str]:
        return tuple(handle.transport_for())

    @endpoint
    def read_error(self, handle: RDMABuffer, transport: str | None = None) -> str:
        try:
            handle.read_into(bytearray(handle.size()), transport=transport).get(timeout=30)
        except Exception as exc:  # the test checks the type and text
            return f"{type(exc).__name__}: {exc}"
        return "no error"

    @endpoint
    def ping(self) -> int:
        return os.getpid()


class AsyncReader(Actor):
    """Reads with ``await`` from an async endpoint (on the proc's event loop)."""

    @endpoint
    async def read(self, handle: RDMABuffer, transport: str | None = None) -> str:
        dst = bytearray(handle.size())
        await handle.read_into(dst, transport=transport)
        return digest(dst)

    @endpoint
    async def ping(self) -> str:
        return "pong"
