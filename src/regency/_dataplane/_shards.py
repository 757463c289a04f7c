"""``TensorShard``: one process's block of a global tensor, registered for one-sided reads.

The owner registers the block's memory (an ``RDMABuffer``) and an 8-byte *version word*
beside it. The word follows a sequence lock: ``2 * version`` while the data is stable, odd
while :meth:`TensorShard.updating` runs. A reader reads the word, then the data, then the
word again: the data is whole when both reads give the same even value
(:mod:`._reshard`). So an owner can update its shard in place while readers pull it, and no
reader ever keeps a torn mix of two versions.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

from ._blocks import Block
from ._buffer import RDMABuffer
from ._errors import RDMAError
from ._memory import flat_bytes, is_numpy_array, is_torch_tensor, local_region

__all__ = ["ShardVersionError", "TensorShard", "dtype_name"]


class ShardVersionError(RDMAError):
    """A shard is already past the version a read asked for."""


def dtype_name(obj: Any) -> tuple[str, int]:
    """The element type of a tensor or array, as ``(name, itemsize)``: ``("float32", 4)``
    for both ``torch.float32`` and ``numpy.float32``."""
    if is_torch_tensor(obj):
        return str(obj.dtype).removeprefix("torch."), int(obj.element_size())
    if is_numpy_array(obj):
        if obj.dtype.byteorder not in ("=", "|"):
            raise ValueError(f"arrays of non-native byte order ({obj.dtype.str}) cannot be "
                             "resharded; convert first: a.astype(a.dtype.newbyteorder('='))")
        return obj.dtype.name, int(obj.itemsize)
    raise TypeError(f"expected a torch.Tensor or numpy.ndarray, got {type(obj).__name__}")


class TensorShard:
    """One process's block of a global tensor, readable by any process holding the handle.

    ``TensorShard(data, block, shape)`` registers ``data`` (a contiguous CPU or CUDA torch
    tensor, or numpy array, of ``block.shape``) as the part ``block`` of a global tensor of
    ``shape``. Return it from an endpoint like any value: readers pass the shards of a
    tensor to :func:`regency.rdma.reshard_into`, which reads from each what their own block
    needs, one-sidedly. An empty block (more ranks than rows) is allowed: it holds nothing.

    Update the data in place inside ``with shard.updating():`` (each exit publishes the next
    version); readers then never keep a torn mix of two versions. ``drop()`` releases it.
    """

    __slots__ = ("_busy", "_data", "_word", "block", "buffer", "dtype", "itemsize", "shape",
                 "word_buffer")
    _word: memoryview | None
    _busy: threading.Lock | None
    buffer: RDMABuffer | None

    def __init__(self, data: Any, block: Block, shape: tuple[int, ...]) -> None:
        shape = Block.whole(shape).shape  # integers, checked
        if not isinstance(block, Block):
            raise TypeError(f"block must be a regency.rdma.Block, got {type(block).__name__}")
        if not block.within(shape):
            raise ValueError(f"block {block} does not fit in a tensor of shape {shape}")
        self.dtype, self.itemsize = dtype_name(data)
        if tuple(data.shape) != block.shape:
            raise ValueError(f"TensorShard: the data's shape {tuple(data.shape)} is not the "
                             f"block's {block.shape}")
        local_region(data, writable=False, what="TensorShard")  # contiguous, CPU or CUDA
        self.block, self.shape = block, shape
        self._data = data
        self._busy = threading.Lock()
        word = bytearray(8)
        self._word = memoryview(word).cast("Q")
        self.buffer = RDMABuffer(flat_bytes(data)) if block.numel else None
        self.word_buffer = RDMABuffer(word)

    @classmethod
    def _rebuild(cls, buffer: RDMABuffer | None, word: RDMABuffer, block: Block,
                 shape: tuple[int, ...], dtype: str, itemsize: int) -> TensorShard:
        self = object.__new__(cls)
        self.buffer, self.word_buffer, self.block, self.shape = buffer, word, block, shape
        self.dtype, self.itemsize = dtype, itemsize
        self._data, self._word, self._busy = None, None, None
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (TensorShard._rebuild, (self.buffer, self.word_buffer, self.block, self.shape,
                                       self.dtype, self.itemsize))

    def __repr__(self) -> str:
        owner = self.word_buffer.owner
        return (f"<TensorShard {self.block} of {self.dtype}{list(self.shape)} owned by "
                f"pid {owner.pid} on {owner.hostname}>")

    @property
    def version(self) -> int:
        """The version published last (in the owner; 0 until the first ``updating()``)."""
        return int(self._owned_word()[0]) // 2

    @contextlib.contextmanager
    def updating(self, version: int | None = None) -> Iterator[None]:
        """Update the data in place inside; a normal exit publishes ``version`` (default:
        the current one plus 1), after the GPU work queued on the data's device is done.

        Readers meanwhile see the shard as changing and read again. If the block raises,
        nothing is published and the shard stays marked as changing (readers wait, and time
        out saying so) until an update completes. Updates do not nest, and one thread at a
        time updates a shard.

        Raises:
            ValueError: ``version`` is not above the current one.
            RuntimeError: the shard is being updated already; or this is a handle, not the
                object that registered the data.
        """
        word = self._owned_word()
        assert self._busy is not None
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("TensorShard.updating: the shard is being updated already "
                               "(updates do not nest; one thread at a time updates a shard)")
        try:
            current = int(word[0]) // 2
            new = current + 1 if version is None else int(version)
            if new <= current:
                raise ValueError(f"TensorShard.updating: version {new} is not above the "
                                 f"current {current}")
            word[0] = 2 * current + 1
            yield  # an exception here leaves the word odd: nothing half-written is published
            _settle(self._data)
            word[0] = 2 * new
        finally:
            self._busy.release()

    def drop(self) -> None:
        """Release the registrations (from any holder); later reads fail."""
        if self.buffer is not None:
            self.buffer.drop().get()
        self.word_buffer.drop().get()

    def _owned_word(self) -> Any:
        if self._word is None:
            raise RuntimeError("this TensorShard is a handle (it was pickled): update it, "
                               "and read its version, through the TensorShard object that "
                               "registered the data")
        return self._word


def _settle(data: Any) -> None:
    """Wait for the GPU work queued on ``data``'s device, on any stream (its writes must
    land before the version does)."""
    if is_torch_tensor(data) and data.device.type == "cuda":
        sys.modules["torch"].cuda.synchronize(data.device)
