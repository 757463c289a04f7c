"""``Point``: one position in an `Extent`, by row-major rank and by coordinates."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import NoReturn

from regency._mesh._checks import OutOfRange, as_int, dimension_not_found
from regency._mesh._extent import Extent, _decode
from regency._mesh._rowmajor import ravel, unravel


class Point(Mapping[str, int]):
    """A read-only mapping from dimension label to coordinate within an `Extent`.

    ``rank`` is the row-major linear index of the point in its extent (the last dimension varies
    fastest). It is *local* to the extent: the point of a sliced mesh counts from 0 whatever
    global ranks the slice covers. ``dict(point)`` gives the plain coordinates, which can be fed
    back to ``mesh.slice(**point)``.

    Example:
        >>> p = Point(5, Extent(["a", "b"], [2, 3]))
        >>> dict(p), p.rank, p.size("b")
        ({'a': 1, 'b': 2}, 5, 3)
        >>> p
        {'a': 1/2, 'b': 2/3}
    """

    __slots__ = ("_coords", "_extent", "_rank")

    _rank: int
    _extent: Extent
    _coords: tuple[int, ...]

    def __init__(self, rank: int, extent: Extent) -> None:
        if not isinstance(extent, Extent):
            raise TypeError(f"extent must be an Extent, not {type(extent).__name__}")
        checked = as_int(rank, "rank")
        count = extent.nelements
        if not 0 <= checked < count:  # Monarch's words first
            raise OutOfRange(f"rank {checked} out of range: total ranks {count}; does not "
                             f"contain rank {checked} (extent {extent})")
        object.__setattr__(self, "_rank", checked)
        object.__setattr__(self, "_extent", extent)
        object.__setattr__(self, "_coords", unravel(checked, extent._sizes))

    @classmethod
    def from_coords(cls, coords: Mapping[str, int], extent: Extent) -> Point:
        """Build the point of ``extent`` at ``coords``, which names every dimension once.

        Raises:
            KeyError: a dimension of ``extent`` is missing from ``coords``, or ``coords`` has a
                label that ``extent`` lacks.
            IndexError: a coordinate is negative or not below its dimension's size.
        """
        extra = [label for label in coords if label not in extent]
        if extra:
            raise KeyError(f"extent {extent} has no dimension(s) {extra!r}")
        values: list[int] = []
        for label, size in extent.items():
            if label not in coords:
                raise KeyError(f"coordinates {dict(coords)!r} are missing dimension {label!r}")
            coord = as_int(coords[label], f"coordinate {label!r}")
            if not 0 <= coord < size:
                raise IndexError(
                    f"coordinate {coord} out of range for dimension {label!r} of size {size}"
                )
            values.append(coord)
        return cls(ravel(values, extent._sizes), extent)

    @property
    def rank(self) -> int:
        """The row-major linear index of this point within its extent."""
        return self._rank

    def __bytes__(self) -> bytes:
        ext = self.extent
        return json.dumps({"rank": self.rank, "labels": list(ext.labels),
                           "sizes": list(ext.sizes)}).encode()

    @staticmethod
    def from_bytes(bytes: bytes) -> Point:  # noqa: A002 (Monarch's parameter name)
        """The point whose ``bytes(point)`` this is."""
        data = _decode(bytes, "Point")
        return Point(data["rank"], Extent(data["labels"], data["sizes"]))

    @property
    def extent(self) -> Extent:
        """The extent this point lies in."""
        return self._extent

    def size(self, label: str) -> int:
        """Return the size of dimension ``label`` of this point's extent (KeyError if absent)."""
        return self._extent[label]

    def __getitem__(self, label: str) -> int:
        try:
            return self._coords[self._extent._labels.index(label)]
        except ValueError:
            raise dimension_not_found(label, self._extent._labels) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._extent._labels)

    def __len__(self) -> int:
        return len(self._coords)

    def __contains__(self, label: object) -> bool:
        return label in self._extent

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Point):
            return NotImplemented
        return self._rank == other._rank and self._extent == other._extent

    def __hash__(self) -> int:
        return hash((Point, self._rank, self._extent))

    def __repr__(self) -> str:
        parts = zip(self._extent._labels, self._coords, self._extent._sizes, strict=True)
        return "{" + ", ".join(f"{label!r}: {c}/{n}" for label, c, n in parts) + "}"

    def __reduce__(self) -> tuple[type[Point], tuple[int, Extent]]:
        return (Point, (self._rank, self._extent))

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"Point is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"Point is immutable; cannot delete {name!r}")
