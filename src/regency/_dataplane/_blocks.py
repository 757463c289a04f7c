"""Blocks of a tensor and the reads that move one block's part of another (pure geometry).

A *block* is a box of a global tensor: an offset and an extent along each dimension. A
shard held in one process is a block, stored contiguously in row-major order. Moving the
part of a source block ``S`` that a destination block ``D`` needs means reading the overlap
``O = S & D`` out of ``S``'s memory. ``O``'s elements are contiguous in ``S`` only in runs
(one per index of its leading dimensions), and so is its place in ``D``: :func:`pieces`
pairs the ranges of both sides. :func:`staged_box` says what to read instead: those pieces, each
straight into place, or one contiguous range of ``S`` around ``O`` (``O`` itself where it
is contiguous there, else a *slab*), staged and copied into place, when the bytes it reads
for nothing cost less than the ranges it saves. Nothing here touches memory.
"""

from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass

__all__ = ["Block", "pieces", "runs", "split_bounds", "staged_box"]


def split_bounds(size: int, index: int, parts: int) -> tuple[int, int]:
    """``[start, stop)`` of part ``index`` of ``parts`` near-equal parts of ``range(size)``.

    The first ``size % parts`` parts have one more element (as ``numpy.array_split``).

    Raises:
        ValueError: ``parts < 1`` or ``index`` not in ``range(parts)``.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    if not 0 <= index < parts:
        raise ValueError(f"index {index} is not in range({parts})")
    small, extra = divmod(size, parts)
    start = index * small + min(index, extra)
    return start, start + small + (1 if index < extra else 0)


@dataclass(frozen=True)
class Block:
    """A box of a global tensor: ``offsets[d]`` and ``shape[d]`` along each dimension ``d``.

    ``Block.whole(shape)`` is the whole tensor; ``.split(dim, index, parts)`` narrows it to
    part ``index`` of ``parts`` along ``dim`` (chain calls for several dims). ``full[b.slices]``
    is the block's part of a full tensor ``full``.
    """

    offsets: tuple[int, ...]
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "offsets", tuple(operator.index(o) for o in self.offsets))
            object.__setattr__(self, "shape", tuple(operator.index(s) for s in self.shape))
        except TypeError:
            raise TypeError(f"a block's offsets and shape are integers: offsets "
                            f"{self.offsets!r}, shape {self.shape!r}") from None
        if len(self.offsets) != len(self.shape):
            raise ValueError(f"a block needs one offset per dimension: offsets {self.offsets} "
                             f"and shape {self.shape} differ in length")
        if any(o < 0 for o in self.offsets) or any(s < 0 for s in self.shape):
            raise ValueError(f"a block's offsets and shape must be >= 0: offsets "
                             f"{self.offsets}, shape {self.shape}")

    @classmethod
    def whole(cls, shape: tuple[int, ...] | list[int]) -> Block:
        """The block of a whole tensor of ``shape``."""
        dims = tuple(shape)
        return cls((0,) * len(dims), dims)

    def split(self, dim: int, index: int, parts: int) -> Block:
        """Part ``index`` of ``parts`` near-equal parts of this block along ``dim``."""
        if not -len(self.shape) <= dim < len(self.shape):
            raise ValueError(f"dim {dim} is out of range for a {len(self.shape)}-D block")
        dim %= len(self.shape)
        start, stop = split_bounds(self.shape[dim], index, parts)
        offsets, shape = list(self.offsets), list(self.shape)
        offsets[dim] += start
        shape[dim] = stop - start
        return Block(tuple(offsets), tuple(shape))

    def __str__(self) -> str:
        return "[" + ", ".join(f"{o}:{e}" for o, e in zip(self.offsets, self.stops,
                                                           strict=True)) + "]"

    @property
    def stops(self) -> tuple[int, ...]:
        """Where the block ends along each dimension (exclusive)."""
        return tuple(o + s for o, s in zip(self.offsets, self.shape, strict=True))

    @property
    def slices(self) -> tuple[slice, ...]:
        """The block as an index of the global tensor: ``full[block.slices]``."""
        return tuple(slice(o, e) for o, e in zip(self.offsets, self.stops, strict=True))

    @property
    def numel(self) -> int:
        """How many elements the block holds."""
        return math.prod(self.shape)

    def within(self, shape: tuple[int, ...]) -> bool:
        """Whether the block lies inside a tensor of ``shape``."""
        return len(shape) == len(self.shape) and all(
            e <= s for e, s in zip(self.stops, shape, strict=True))

    def intersect(self, other: Block) -> Block | None:
        """The overlap of two blocks of the same tensor (None when they share nothing)."""
        lo = tuple(max(a, b) for a, b in zip(self.offsets, other.offsets, strict=True))
        hi = tuple(min(a, b) for a, b in zip(self.stops, other.stops, strict=True))
        if any(h <= low for low, h in zip(lo, hi, strict=True)):
            return None
        return Block(lo, tuple(h - low for low, h in zip(lo, hi, strict=True)))

    def relative_to(self, outer: Block) -> tuple[slice, ...]:
        """This block as an index of ``outer``'s own (local) tensor."""
        return tuple(slice(o - p, o - p + s) for o, p, s in
                     zip(self.offsets, outer.offsets, self.shape, strict=True))


def _first_wide_dim(box: Block) -> int:
    """The first dimension along which ``box`` is more than one element wide."""
    return next((d for d, s in enumerate(box.shape) if s > 1), max(len(box.shape) - 1, 0))


def _slab(inner: Block, outer: Block) -> Block:
    """The smallest box of ``outer`` around ``inner`` that is contiguous in ``outer``.

    Up to ``inner``'s first wide dimension it follows ``inner``; after it, it spans ``outer``.
    """
    d = _first_wide_dim(inner)
    offsets = inner.offsets[:d + 1] + outer.offsets[d + 1:]
    shape = inner.shape[:d + 1] + outer.shape[d + 1:]
    return Block(offsets, shape)


def staged_box(overlap: Block, source: Block, ranges: int, itemsize: int,
               range_cost: int) -> Block | None:
    """What to stage to get ``overlap`` out of ``source``'s memory instead of moving its
    ``ranges`` :func:`pieces` straight into place: one contiguous range of ``source`` around
    the overlap (the overlap itself where it is contiguous there), read whole, then copied
    into place. Chosen (else None) when the bytes it reads for nothing are fewer than
    ``range_cost`` (the cost of one more range, in bytes) times the ranges it saves.
    """
    if ranges <= 1:
        return None
    slab = _slab(overlap, source)
    wasted = (slab.numel - overlap.numel) * itemsize
    return slab if wasted <= (ranges - 1) * range_cost else None


def runs(box: Block, source: Block, itemsize: int) -> list[tuple[int, int]]:
    """The contiguous byte ranges ``(start, length)`` of ``box`` in ``source``'s memory
    (row-major, ``itemsize`` bytes an element), in ``box``'s row-major order, merged where
    they touch."""
    if box.numel == 0:
        return []
    dims = len(box.shape)
    if dims == 0:
        return [(0, itemsize)]  # a scalar
    strides = [itemsize] * dims
    for d in range(dims - 2, -1, -1):
        strides[d] = strides[d + 1] * source.shape[d + 1]
    local = [o - p for o, p in zip(box.offsets, source.offsets, strict=True)]
    # the trailing dims that box spans whole form one run with the last partial one
    inner = dims - 1
    while inner > 0 and box.shape[inner] == source.shape[inner]:
        inner -= 1
    length = box.shape[inner] * strides[inner]
    base = sum(c * s for c, s in zip(local, strides, strict=True))
    out: list[tuple[int, int]] = []
    for index in itertools.product(*(range(s) for s in box.shape[:inner])):
        start = base + sum(i * s for i, s in zip(index, strides, strict=False))
        if out and out[-1][0] + out[-1][1] == start:
            out[-1] = (out[-1][0], out[-1][1] + length)
        else:
            out.append((start, length))
    return out


def pieces(box: Block, source: Block, dest: Block,
           itemsize: int) -> list[tuple[int, int, int]]:
    """How to move ``box`` from ``source``'s memory to ``dest``'s (both row-major):
    ``(offset in source, offset in dest, length)`` byte ranges, each contiguous on both
    sides, in ``box``'s row-major order."""
    a, b = runs(box, source, itemsize), runs(box, dest, itemsize)
    out: list[tuple[int, int, int]] = []
    i = j = used_a = used_b = 0
    while i < len(a) and j < len(b):
        n = min(a[i][1] - used_a, b[j][1] - used_b)
        out.append((a[i][0] + used_a, b[j][0] + used_b, n))
        used_a, used_b = used_a + n, used_b + n
        if used_a == a[i][1]:
            i, used_a = i + 1, 0
        if used_b == b[j][1]:
            j, used_b = j + 1, 0
    return out



