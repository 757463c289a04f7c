"""Argument validation shared by the mesh value types.

Every check raises with a message that names the offending argument and value, so a user who
mistypes a mesh dimension learns what was wrong without reading this package.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable


def as_int(value: object, what: str) -> int:
    """Return ``value`` as a plain ``int``; ``bool`` is rejected as almost surely a bug.

    Raises:
        TypeError: ``value`` is not an integer (anything with ``__index__`` counts).
    """
    if type(value) is int:  # the common case, without the slow protocol check below
        return value
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not bool ({value!r})")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"{what} must be an int, not {type(value).__name__} ({value!r})"
        ) from None


def as_ints(values: Iterable[object], what: str, *, minimum: int) -> tuple[int, ...]:
    """Return ``values`` as a tuple of ints, each at least ``minimum``.

    Raises:
        TypeError: ``values`` is a string or not iterable, or an element is not an int.
        ValueError: an element is below ``minimum``.
    """
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of ints, not {type(values).__name__}")
    try:
        items = tuple(values)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of ints, not {type(values).__name__}") from None
    result = tuple(as_int(item, f"{what}[{i}]") for i, item in enumerate(items))
    for i, item in enumerate(result):
        if item < minimum:
            raise ValueError(f"{what}[{i}] must be >= {minimum}, got {item}")
    return result


def as_labels(values: Iterable[object], what: str = "labels") -> tuple[str, ...]:
    """Return ``values`` as a tuple of unique, non-empty strings.

    Raises:
        TypeError: ``values`` is a single string or not iterable, or a label is not a string.
        ValueError: a label is empty or appears twice.
    """
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of strings, not a single string {values!r}")
    try:
        labels = tuple(values)
    except TypeError:
        raise TypeError(
            f"{what} must be a sequence of strings, not {type(values).__name__}"
        ) from None
    result: list[str] = []
    for i, label in enumerate(labels):
        if not isinstance(label, str):
            raise TypeError(f"{what}[{i}] must be a str, not {type(label).__name__} ({label!r})")
        if not label:
            raise ValueError(f"{what}[{i}] must be a non-empty string")
        if label in result:
            raise ValueError(f"duplicate dimension label {label!r} in {what} {labels!r}")
        result.append(label)
    return tuple(result)


def check_same_length(labels: tuple[str, ...], sizes: tuple[int, ...], what: str) -> None:
    """Raise ``ValueError`` unless there is exactly one size per label."""
    if len(labels) != len(sizes):
        raise ValueError(  # Monarch's words first
            f"{what}: label/sizes dimension mismatch: {len(labels)} != {len(sizes)} (got "
            f"{len(labels)} labels {labels!r} but {len(sizes)} sizes {sizes!r})"
        )


class OutOfRange(IndexError, ValueError):
    """An index past the end of a mesh's ranks or a value mesh's values: an ``IndexError``,
    as a sequence's lookup raises, and a ``ValueError``, as Monarch raises."""


class UnknownDimension(ValueError, TypeError):
    """A selection or rename names a dimension the mesh lacks: a ``ValueError``, and a
    ``TypeError`` as Monarch's ``slice`` raises."""


def unknown_dimension(label: object, labels: tuple[str, ...]) -> UnknownDimension:
    """Return the error for a selection or rename that names a dimension the mesh lacks."""
    return UnknownDimension(f"mesh does not have dimension {label!r}; its dimensions are {labels}")


class DimensionNotFound(KeyError, ValueError):
    """A point or extent has no dimension of that name: a ``KeyError``, as a mapping's
    lookup raises, and a ``ValueError`` with Monarch's words, as Monarch's raise."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def dimension_not_found(label: object, labels: tuple[str, ...]) -> DimensionNotFound:
    """Return the error for ``point[label]`` or ``extent[label]`` of a missing dimension."""
    return DimensionNotFound(f"Dimension {label!r} not found; the dimensions are {labels}")
