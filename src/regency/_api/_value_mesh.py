"""``ValueMesh``: one value per rank, with the shape of the mesh slice that produced it."""

from __future__ import annotations

import pprint
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from .._mesh import MeshTrait, Point, Shape
from .._mesh._checks import OutOfRange

__all__ = ["ValueMesh"]

R = TypeVar("R")



class ValueMesh(MeshTrait, Generic[R]):
    """Per-rank results of a ``call``, indexed like the mesh that was called.

    Unlike Monarch's, it is subscriptable: ``vm[i]`` takes the flat (row-major) index and
    ``vm[point]`` a ``Point`` or a mapping of coordinates.
    """

    def __init__(self, shape: Shape, values: Sequence[R]) -> None:
        if len(values) != len(shape):
            raise ValueError(f"ValueMesh of {len(shape)} ranks got {len(values)} values")
        self._shape_ = shape
        self._values: dict[int, R] = dict(zip(shape.ranks(), values))

    @property
    def _shape(self) -> Shape:
        return self._shape_

    def _new_with_shape(self, shape: Shape) -> ValueMesh[R]:
        vm = object.__new__(ValueMesh)
        vm._shape_ = shape
        vm._values = {g: self._values[g] for g in shape.ranks()}
        return vm

    def items(self) -> Iterator[tuple[Point, R]]:
        """``(point, value)`` pairs in row-major order; points are relative to this mesh."""
        shape = self._shape_
        for local, g in enumerate(shape.ranks()):
            yield shape.point(local), self._values[g]

    def values(self) -> list[R]:
        """The values in row-major order: a new list (as Monarch gives, not a generator)."""
        values = self._values
        return [values[g] for g in self._shape_.ranks()]

    def __iter__(self) -> Iterator[tuple[Point, R]]:
        return self.items()

    def item(self, **coords: int) -> R:
        """The value at the given coordinates: exactly one per dimension."""
        labels = self._shape_.labels
        extra = [k for k in coords if k not in labels]
        if extra:
            raise KeyError(f"item has extra dimensions: {extra}; this mesh has {list(labels)}")
        missing = [k for k in labels if k not in coords]
        if missing:
            raise KeyError(f"item needs a coordinate for {missing} (dimensions {list(labels)})")
        return self._at(Point.from_coords(coords, self._shape_.extent).rank)

    def get(self, rank: int) -> R:
        """The value at a flat, row-major index (the rank within this mesh)."""
        n = len(self._shape_)
        if not -n <= rank < n:
            raise OutOfRange(f"index {rank} out of range (len={n}): a ValueMesh of {n} values")
        return self._at(rank % n)

    @staticmethod
    def from_indexed(shape: Shape, pairs: Iterable[tuple[int, R]]) -> ValueMesh[R]:
        """A ValueMesh over ``shape`` from ``(rank, value)`` pairs in any order.

        Ranks are row-major indices within ``shape``; each must appear (a later pair for the
        same rank replaces an earlier one, as in Monarch).

        Raises:
            ValueError: a rank is out of range or missing.
        """
        n = len(shape)
        by_rank: dict[int, R] = {}
        for rank, value in pairs:
            if not 0 <= rank < n:
                raise ValueError(f"invalid value mesh: rank {rank} is outside a shape of "
                                 f"{n} ranks {shape.extent}")
            by_rank[rank] = value
        missing = [r for r in range(n) if r not in by_rank]
        if missing:
            raise ValueError(f"invalid value mesh: expected {n} ranks, but ranks "
                             f"{missing[:8]} have no value")
        return ValueMesh(shape, [by_rank[r] for r in range(n)])

    def __getitem__(self, key: int | Point | dict[str, int]) -> R:
        if isinstance(key, int):
            return self.get(key)
        if isinstance(key, Point):
            return self.item(**dict(key))
        if isinstance(key, dict):
            return self.item(**key)
        raise TypeError(
            f"ValueMesh index must be an int, a Point or a dict, not {type(key).__name__}")

    def _at(self, local: int) -> R:
        return self._values[self._shape_.global_rank(local)]

    def __len__(self) -> int:
        return len(self._shape_)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ValueMesh):
            return NotImplemented
        return self.extent == other.extent and list(self.values()) == list(other.values())

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        dense = Shape.from_sizes(self._shape_.labels, self._shape_.extent.sizes)
        return (ValueMesh, (dense, list(self.values())))

    def __repr__(self) -> str:
        items = tuple(self.items())  # Monarch's form: ((point, value), ...), wrapped by
        head = f"ValueMesh({self._shape_.extent})"  # pprint past 80 columns
        return f"{head}:\n{textwrap.indent(pprint.pformat(items), '  ')}" if items else head
