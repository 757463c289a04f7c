"""``Extent``: the labelled sizes of a mesh, without any rank layout."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from regency._mesh._checks import as_ints, as_labels, check_same_length, dimension_not_found
from regency._mesh._rowmajor import product

if TYPE_CHECKING:
    from regency._mesh._shape import Shape


def _decode(data: bytes, what: str) -> dict[str, Any]:
    """The mapping ``bytes(x)`` wrote for an Extent or Point."""
    try:
        value = json.loads(data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}.from_bytes: not the bytes of a regency {what}: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what}.from_bytes: not the bytes of a regency {what}")
    return value


class Extent(Mapping[str, int]):
    """A read-only mapping from dimension label to size, in dimension order.

    An extent says how big a mesh is along each named dimension; it says nothing about which
    global ranks the mesh covers (that is a `Shape`'s job). Order matters: ``Extent(["a", "b"],
    [2, 3])`` and ``Extent(["b", "a"], [3, 2])`` describe different row-major layouts and are
    not equal. An extent only compares equal to another extent.

    Example:
        >>> e = Extent(["host", "gpu"], [2, 4])
        >>> e["gpu"], e.nelements, str(e)
        (4, 8, '{host: 2, gpu: 4}')
    """

    __slots__ = ("_labels", "_sizes")

    _labels: tuple[str, ...]
    _sizes: tuple[int, ...]

    def __init__(self, labels: Sequence[str], sizes: Sequence[int]) -> None:
        checked_labels = as_labels(labels)
        checked_sizes = as_ints(sizes, "sizes", minimum=0)
        check_same_length(checked_labels, checked_sizes, "Extent")
        object.__setattr__(self, "_labels", checked_labels)
        object.__setattr__(self, "_sizes", checked_sizes)

    @property
    def labels(self) -> list[str]:
        """The dimension labels, outermost first (a new list, as Monarch's)."""
        return list(self._labels)

    @property
    def sizes(self) -> list[int]:
        """The dimension sizes, in label order (a new list, as Monarch's)."""
        return list(self._sizes)

    @property
    def region(self) -> Shape:
        """The dense row-major region of this extent: labels over ``Slice(0, sizes, strides)``
        (Monarch's ``Region`` is the same pair)."""
        from regency._mesh._shape import Shape

        return Shape.from_sizes(self.labels, self.sizes)

    def __bytes__(self) -> bytes:
        return json.dumps({"labels": list(self.labels), "sizes": list(self.sizes)}).encode()

    @staticmethod
    def from_bytes(bytes: bytes) -> Extent:  # noqa: A002 (Monarch's parameter name)
        """The extent whose ``bytes(extent)`` this is."""
        data = _decode(bytes, "Extent")
        return Extent(data["labels"], data["sizes"])

    @property
    def nelements(self) -> int:
        """The number of points: the product of the sizes (1 for a 0-dim extent)."""
        return product(self._sizes)

    def __getitem__(self, label: str) -> int:
        try:
            return self._sizes[self._labels.index(label)]
        except ValueError:
            raise dimension_not_found(label, self._labels) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def __contains__(self, label: object) -> bool:
        return label in self._labels

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Extent):
            return NotImplemented
        return self._labels == other._labels and self._sizes == other._sizes

    def __hash__(self) -> int:
        return hash((Extent, self._labels, self._sizes))

    def __str__(self) -> str:
        body = ", ".join(f"{label}: {size}" for label, size in self.items())
        return "{" + body + "}"

    def __repr__(self) -> str:
        return f"Extent({self})"

    def __reduce__(self) -> tuple[type[Extent], tuple[tuple[str, ...], tuple[int, ...]]]:
        return (Extent, (self._labels, self._sizes))

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"Extent is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"Extent is immutable; cannot delete {name!r}")
