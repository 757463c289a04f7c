"""``Shape``: labelled dimensions over a `Slice` of global ranks, and the mesh algebra on it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from regency._mesh import _reshape, _select
from regency._mesh._checks import as_ints, as_labels, check_same_length
from regency._mesh._extent import Extent, _decode
from regency._mesh._ndslice import NDSlice
from regency._mesh._point import Point
from regency._mesh._select import Selector
from regency._mesh._slice import Slice


@dataclass(frozen=True, slots=True)
class Shape:
    """Named dimensions laid over a strided slice of global ranks.

    The `Slice` keeps *global* ranks (which procs or actors the mesh covers), while `Point`
    and local ranks count from 0 within this shape. Every operation returns a new shape and
    never moves a rank: ``select`` keeps a subset, ``flatten``/``split``/``rename`` only
    regroup the dimensions.

    Example:
        >>> s = Shape.from_sizes(["host", "gpu"], [2, 4])
        >>> s.select(gpu=slice(1, 3)).ranks()
        [1, 2, 5, 6]
        >>> s.select(host=1, gpu=slice(None, None, 2)).ranks()
        [4, 6]
    """

    labels: tuple[str, ...]
    slice: Slice
    _extent: Extent = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        labels = as_labels(self.labels)
        if hasattr(self.slice, "to_slice"):  # Monarch's NDSlice
            object.__setattr__(self, "slice", self.slice.to_slice())
        if not isinstance(self.slice, Slice):
            raise TypeError(f"Shape needs a Slice, not {type(self.slice).__name__}")
        check_same_length(labels, self.slice.sizes, "Shape")
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "_extent", Extent(labels, self.slice.sizes))

    def __str__(self) -> str:
        """Monarch's form: ``{host=2,gpu=4}`` (``repr`` keeps the slice)."""
        return "{" + ",".join(f"{lab}={n}" for lab, n in zip(self.labels, self.slice.sizes)) + "}"

    @classmethod
    def unity(cls) -> Shape:
        """Return the 0-dim shape of the single global rank 0."""
        return cls((), Slice(0, (), ()))

    @classmethod
    def from_sizes(cls, labels: Sequence[str], sizes: Sequence[int]) -> Shape:
        """Return the dense row-major shape of ``sizes`` over global ranks from 0."""
        checked_labels = as_labels(labels)
        checked_sizes = as_ints(sizes, "sizes", minimum=0)
        check_same_length(checked_labels, checked_sizes, "Shape")
        return cls(checked_labels, Slice.new_row_major(checked_sizes))

    @property
    def extent(self) -> Extent:
        """The labelled sizes of this shape."""
        return self._extent

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.labels)

    def __len__(self) -> int:
        return len(self.slice)

    def ranks(self) -> list[int]:
        """Return the global ranks of this shape in row-major order."""
        return self.slice.ranks()

    def point(self, local_rank: int) -> Point:
        """Return the `Point` of ``local_rank`` (IndexError if out of range)."""
        return Point(local_rank, self._extent)

    def global_rank(self, local_rank: int) -> int:
        """Return the global rank at ``local_rank`` (IndexError if out of range)."""
        return self.slice.global_rank(local_rank)

    def local_rank(self, global_rank: int) -> int:
        """Return the local rank of ``global_rank`` (ValueError if it is not in this shape)."""
        return self.slice.local_rank(global_rank)

    def select(self, *label_and_slice: Any, **selections: Selector) -> Shape:
        """Select along named dimensions: ``shape.select(host=0, gpu=slice(0, 4, 2))``.

        An int fixes the coordinate and removes the dimension (negative counts from the end);
        a ``slice`` or ``range`` keeps the dimension and restricts it, with any positive step.
        An empty restriction gives a dimension of size 0.

        Raises:
            ValueError: an unknown dimension, or a step that is not positive.
            IndexError: an int out of range for its dimension.
            TypeError: a selector that is not an int, slice or range.

        Monarch's form, ``select(label, slice)`` (one dimension), is accepted too.
        """
        if label_and_slice:
            label, selector = label_and_slice  # Monarch's positional form
            selections = {label: selector}
        elif set(selections) == {"label", "slice"} and "label" not in self.labels:
            selections = {str(selections["label"]): selections["slice"]}
        return Shape(*_select.select(self.labels, self.slice, selections))

    def at(self, label: str, index: int) -> Shape:
        """Fix ``label`` at ``index``, removing that dimension (Monarch's ``Shape.at``)."""
        return self.select(**{label: index})

    def index(self, **kwargs: int) -> Shape:
        """Fix several dimensions at once, removing them: ``shape.index(host=0, gpu=3)``."""
        return self.select(**kwargs)

    def coordinates(self, rank: int) -> dict[str, int]:
        """The coordinates of global ``rank`` (ValueError if it is not in this shape)."""
        return dict(self.point(self.local_rank(rank)))

    @property
    def ndslice(self) -> NDSlice:
        """The slice, as Monarch's `NDSlice`."""
        return NDSlice.of(self.slice)

    @property
    def region(self) -> Shape:
        """This shape: labels over a slice are what Monarch calls a ``Region``."""
        return self

    def __bytes__(self) -> bytes:
        view = self.slice
        return json.dumps({"labels": list(self.labels), "offset": view.offset,
                           "sizes": list(view.sizes), "strides": list(view.strides)}).encode()

    @staticmethod
    def from_bytes(bytes: bytes) -> Shape:  # noqa: A002 (Monarch's parameter name)
        """The shape whose ``bytes(shape)`` this is."""
        data = _decode(bytes, "Shape")
        return Shape(tuple(data["labels"]),
                     Slice(data["offset"], tuple(data["sizes"]), tuple(data["strides"])))

    def flatten(self, name: str) -> Shape:
        """Merge all dimensions into one called ``name`` (0-dim becomes size 1).

        Raises:
            ValueError: the ranks are not evenly spaced ("cannot flatten sparse mesh ...").
        """
        return Shape(*_reshape.flatten(self.labels, self.slice, name))

    def split(self, **arguments: Sequence[str] | int) -> Shape:
        """Split dimensions: ``shape.split(host=("dp", "pp"), pp=4)``; see `_reshape.split`."""
        return Shape(*_reshape.split(self.labels, self.slice, arguments))

    def rename(self, **names: str) -> Shape:
        """Rename dimensions: ``shape.rename(host="node")``."""
        return Shape(*_reshape.rename(self.labels, self.slice, names))

    def __reduce__(self) -> tuple[type[Shape], tuple[tuple[str, ...], Slice]]:
        return (Shape, (self.labels, self.slice))
