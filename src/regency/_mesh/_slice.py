"""``Slice``: a strided, n-dimensional view into a flat space of global ranks.

Theory of operation: local rank ``i`` (row-major over ``sizes``) has coordinates ``c`` and lives
at global rank ``offset + sum(c[d] * strides[d])``. Every slice that the mesh algebra derives
from a dense row-major layout (by selecting, splitting or flattening) is *nested*: once the
dimensions are sorted by decreasing stride, each stride is larger than the whole span of the
dimensions after it. For a nested slice, ``local_rank`` is a greedy division, one step per
dimension. Hand-built slices need not be nested; ``local_rank`` then falls back to a scan.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from regency._mesh._checks import as_int, as_ints
from regency._mesh._rowmajor import check_index, product, ravel, row_major_strides, unravel


@dataclass(frozen=True, slots=True)
class Slice:
    """A strided view: ``offset`` plus, per dimension, a size and a stride (all in ranks).

    ``sizes`` and ``strides`` may be given as any sequence of ints; they are stored as tuples.
    Sizes may be 0 (an empty slice); strides must be positive.

    Example:
        >>> s = Slice(offset=1, sizes=(2, 2), strides=(4, 2))
        >>> s.ranks(), s.global_rank(3), s.local_rank(5)
        ([1, 3, 5, 7], 7, 2)
    """

    offset: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def __post_init__(self) -> None:
        offset = as_int(self.offset, "offset")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        sizes = as_ints(self.sizes, "sizes", minimum=0)
        strides = as_ints(self.strides, "strides", minimum=1)
        if len(sizes) != len(strides):
            raise ValueError(
                f"Slice: got {len(sizes)} sizes {sizes!r} but {len(strides)} strides {strides!r}"
            )
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "strides", strides)

    @classmethod
    def new_row_major(cls, sizes: Sequence[int]) -> Slice:
        """Return the dense row-major slice of ``sizes`` starting at global rank 0."""
        checked = as_ints(sizes, "sizes", minimum=0)
        return cls(0, checked, row_major_strides(checked))

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.sizes)

    def __len__(self) -> int:
        return product(self.sizes)

    def __iter__(self) -> Iterator[int]:
        return iter(self.ranks())

    def coordinates(self, local_rank: int) -> tuple[int, ...]:
        """Return the row-major coordinates of ``local_rank`` (IndexError if out of range)."""
        check_index(local_rank, len(self), "local rank")
        return unravel(local_rank, self.sizes)

    def global_rank(self, local_rank: int) -> int:
        """Return the global rank of the ``local_rank``-th element (IndexError if out of range)."""
        coords = self.coordinates(local_rank)
        return self.offset + sum(c * s for c, s in zip(coords, self.strides, strict=True))

    def local_rank(self, global_rank: int) -> int:
        """Return the position of ``global_rank`` in this slice.

        Raises:
            ValueError: ``global_rank`` is not one of this slice's ranks.
        """
        coords = self._greedy_coordinates(global_rank)
        if coords is not None:
            return ravel(coords, self.sizes)
        if not self._is_nested():
            for local, rank in enumerate(self.ranks()):
                if rank == global_rank:
                    return local
        raise ValueError(f"global rank {global_rank} is not in {self}")

    def ranks(self) -> list[int]:
        """Return every global rank of this slice, in row-major order of local rank."""
        ranks = [self.offset]
        for size, stride in zip(self.sizes, self.strides, strict=True):
            ranks = [base + i * stride for base in ranks for i in range(size)]
        return ranks

    def is_contiguous(self) -> bool:
        """Return whether the ranks are exactly ``offset, offset + 1, ..., offset + len - 1``."""
        if len(self) == 0:
            return True
        dense = row_major_strides(self.sizes)
        return all(
            size == 1 or stride == expected
            for size, stride, expected in zip(self.sizes, self.strides, dense, strict=True)
        )

    def __reduce__(self) -> tuple[type[Slice], tuple[int, tuple[int, ...], tuple[int, ...]]]:
        return (Slice, (self.offset, self.sizes, self.strides))

    def _greedy_coordinates(self, global_rank: int) -> tuple[int, ...] | None:
        """Find coordinates of ``global_rank`` assuming a nested layout, or None."""
        if len(self) == 0:
            return None
        remainder = global_rank - self.offset
        coords = [0] * self.ndim
        for dim in sorted(range(self.ndim), key=lambda d: -self.strides[d]):
            coord = min(max(remainder, 0) // self.strides[dim], self.sizes[dim] - 1)
            coords[dim] = coord
            remainder -= coord * self.strides[dim]
        return tuple(coords) if remainder == 0 else None

    def _is_nested(self) -> bool:
        """Whether each stride exceeds the span of all dimensions with smaller strides."""
        span = 0
        for dim in sorted(range(self.ndim), key=lambda d: self.strides[d]):
            if self.sizes[dim] <= 1:
                continue
            if self.strides[dim] <= span:
                return False
            span += (self.sizes[dim] - 1) * self.strides[dim]
        return True
