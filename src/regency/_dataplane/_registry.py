"""The owner's side: registered memory, validity slots, and ``drop``.

One :class:`Registry` per process (recreated after ``fork``). ``register`` keeps the region's
owning object alive and publishes its key in a slot; ``drop`` clears the slot *before* letting
the memory go, so one-sided readers that check the slot see the drop. Slots live in blocks of
``ctypes`` words that are never freed, so a slot address stays readable for the life of the
process; a reused slot gets a new random key. All methods are thread-safe (the data-plane
server threads, the loop thread and user threads all use it).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import secrets
import threading
from dataclasses import dataclass

from ._errors import BufferDroppedError
from ._memory import Region

__all__ = ["Registration", "Registry", "registry"]

_BLOCK = 1024


@dataclass
class Registration:
    """One registered region."""

    reg_id: int
    key: int
    region: Region
    slot: tuple[int, int]  # (block, index)
    slot_addr: int
    takers: int = 0  # a lent tensor: dropped after this many takes (0: a plain buffer)


class _Slots:
    """Validity words: allocate, set, clear; addresses never change."""

    def __init__(self) -> None:
        self.blocks: list[ctypes.Array[ctypes.c_uint64]] = []
        self.free: list[tuple[int, int]] = []

    def take(self, key: int) -> tuple[tuple[int, int], int]:
        if not self.free:
            block = (ctypes.c_uint64 * _BLOCK)()
            self.blocks.append(block)
            b = len(self.blocks) - 1
            self.free.extend((b, i) for i in range(_BLOCK - 1, -1, -1))
        b, i = self.free.pop()
        block = self.blocks[b]
        block[i] = key
        return (b, i), ctypes.addressof(block) + 8 * i

    def clear(self, slot: tuple[int, int]) -> None:
        self.blocks[slot[0]][slot[1]] = 0
        self.free.append(slot)


class Registry:
    """Registered regions of this process, by registration id."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._regs: dict[int, Registration] = {}
        self._slots = _Slots()
        self._ids = itertools.count(1)

    def register(self, region: Region, takers: int = 0) -> Registration:
        """Keep ``region`` alive and reachable until :meth:`drop` (or, with ``takers``,
        until that many :meth:`taken` calls)."""
        key = secrets.randbits(63) | 1  # never 0: 0 marks a free slot
        with self._lock:
            reg_id = next(self._ids)
            slot, addr = self._slots.take(key)
            reg = Registration(reg_id, key, region, slot, addr, takers)
            self._regs[reg_id] = reg
        return reg

    def lookup(self, reg_id: int, key: int) -> Registration:
        """The live registration, or raise :class:`BufferDroppedError`."""
        reg = self._regs.get(reg_id)
        if reg is None or reg.key != key:
            raise BufferDroppedError(f"RDMABuffer {reg_id} not found in pid {self.pid}: "
                                     "it was dropped")
        return reg

    def drop(self, reg_id: int, key: int) -> bool:
        """Forget a registration; returns whether it was there."""
        with self._lock:
            reg = self._regs.get(reg_id)
            if reg is None or reg.key != key:
                return False
            del self._regs[reg_id]
            self._slots.clear(reg.slot)  # readers see the drop before the memory can go
        return True

    def taken(self, reg_id: int, key: int) -> bool:
        """One taker of a lent registration is done; drops it after the last. Returns
        whether the registration was dropped."""
        with self._lock:
            reg = self._regs.get(reg_id)
            if reg is None or reg.key != key:
                return False
            reg.takers -= 1
            if reg.takers > 0:
                return False
        return self.drop(reg_id, key)

    def lends(self) -> int:
        """How many lent tensors are waiting for takers."""
        with self._lock:
            return sum(1 for reg in self._regs.values() if reg.takers > 0)

    def __len__(self) -> int:
        return len(self._regs)


_registry: Registry | None = None
_lock = threading.Lock()


def registry() -> Registry:
    """The registry of this process."""
    global _registry
    reg = _registry
    if reg is None or reg.pid != os.getpid():
        with _lock:
            if _registry is None or _registry.pid != os.getpid():
                _registry = Registry()
            reg = _registry
    return reg


def peek() -> Registry | None:
    """The registry of this process if one was made (never makes one)."""
    reg = _registry
    return reg if reg is not None and reg.pid == os.getpid() else None
