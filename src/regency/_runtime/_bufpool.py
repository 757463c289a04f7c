"""A pool of large receive buffers, reused once nothing refers to them any more.

Fresh memory is expensive: the kernel zero-fills every new page on first touch, which on
the machines we measured runs at well under 1 GB/s, slower than the socket itself. Large
messages of the same size tend to repeat (weights, batches, echoes), so the decoder takes its
large destination buffers from here: a buffer whose only reference is the pool's is handed
out again instead of allocating a new one. The pool is bounded in bytes; the oldest free
buffers are dropped first.

A new buffer of ``LAZY_BUFFER_BYTES`` or more is lazily committed memory (an anonymous
``mmap``, see ``regency._transport._buffers``): a peer that declares a huge buffer and
never sends it does not make this process zero, and keep, that much memory (issue 19).
"""

from __future__ import annotations

import sys
import threading

from .._transport._buffers import allocate_buffer
from .._wire import Destination

MIN_POOLED = 1 << 20


class BufferPool:
    """Reusable receive buffers keyed by exact size."""

    def __init__(self, capacity_bytes: int = 1 << 30) -> None:
        self.capacity = capacity_bytes
        self._buffers: list[Destination] = []
        self._lock = threading.Lock()

    def allocate(self, size: int) -> Destination:
        """A buffer of exactly ``size`` bytes (contents undefined)."""
        if size < MIN_POOLED:
            return bytearray(size)
        with self._lock:
            buffers = self._buffers
            for i in range(len(buffers)):
                # 2 = the list's reference and getrefcount's argument: nobody else holds it
                if len(buffers[i]) == size and sys.getrefcount(buffers[i]) <= 2:
                    buf = buffers.pop(i)
                    buffers.append(buf)  # most recently used last
                    return buf
            buf = allocate_buffer(size)
            self._buffers.append(buf)
            self._trim()
            return buf

    def _trim(self) -> None:
        buffers = self._buffers
        total = sum(len(b) for b in buffers)
        i = 0
        while total > self.capacity and i < len(buffers) - 1:
            if sys.getrefcount(buffers[i]) <= 2:
                total -= len(buffers.pop(i))
            else:
                i += 1
        # buffers still in use are forgotten once over capacity; their owners free them
        while total > self.capacity and len(self._buffers) > 1:
            total -= len(self._buffers.pop(0))


POOL = BufferPool()
