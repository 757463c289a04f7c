"""Actors for the shared-memory argument tests (importable, so pickled by reference)."""

from __future__ import annotations

import os
from typing import Any

from regency._runtime import _current
from regency.actor import Actor, endpoint


def is_shared(obj: Any) -> bool:
    """Whether an array's (or a torch tensor's) memory lies in a regency memfd mapping."""
    address = obj.data_ptr() if hasattr(obj, "data_ptr") else obj.ctypes.data
    with open("/proc/self/maps") as maps:
        for line in maps:
            span = line.split(maxsplit=1)[0]
            start, end = (int(x, 16) for x in span.split("-"))
            if start <= address < end:
                return "memfd:regency" in line
    return False


class Holder(Actor):
    """Echoes, keeps what it is given, and reports on its own process."""

    def __init__(self) -> None:
        self.kept: list[Any] = []

    @endpoint
    def echo(self, x: Any) -> Any:
        return x

    @endpoint
    def shared(self, x: Any) -> bool:
        return is_shared(x)

    @endpoint
    def keep(self, x: Any) -> int:
        self.kept.append(x)
        return len(self.kept)

    @endpoint
    def kept_sums(self) -> list[int]:
        return [int(x.sum()) for x in self.kept]

    @endpoint
    def add_one_in_place(self, x: Any) -> int:
        x += 1
        return int(x[0])

    @endpoint
    def pool_bytes(self) -> int:
        rt = _current.get()
        assert rt is not None
        return rt.router.shm_pool.held_bytes()

    @endpoint
    def open_fds(self) -> int:
        return len(os.listdir("/proc/self/fd"))
