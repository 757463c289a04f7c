"""Selection: fix or restrict named dimensions of a labelled `Slice`.

An integer fixes a coordinate and removes its dimension; a ``slice`` or ``range`` keeps the
dimension and restricts it. Because a restriction with step ``k`` of a dimension with stride
``s`` is again a dimension with stride ``k * s``, any positive step stays rectangular (Monarch
rejects steps > 1 as a "nonrectangular shape"; the algebra here does not need to).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

from regency._mesh._checks import as_int, unknown_dimension
from regency._mesh._slice import Slice

Selector: TypeAlias = int | slice | range
"""What ``select``/``mesh.slice`` accepts per dimension: an index, a ``slice`` or a ``range``."""


def select(
    labels: tuple[str, ...], view: Slice, selections: Mapping[str, Selector]
) -> tuple[tuple[str, ...], Slice]:
    """Apply ``selections`` (label -> selector) to the labelled slice ``(labels, view)``.

    Returns:
        The labels that remain and the selected slice.

    Raises:
        ValueError: a label is not a dimension, or a slice step is not positive.
        IndexError: an integer index is out of range for its dimension.
        TypeError: a selector is not an int, slice or range.
    """
    for label in selections:
        if label not in labels:
            raise unknown_dimension(label, labels)
    offset = view.offset
    kept_labels: list[str] = []
    sizes: list[int] = []
    strides: list[int] = []
    for label, size, stride in zip(labels, view.sizes, view.strides, strict=True):
        if label not in selections:
            kept_labels.append(label)
            sizes.append(size)
            strides.append(stride)
            continue
        selector = selections[label]
        if isinstance(selector, (slice, range)):
            start, count, step = _restrict(label, size, selector)
            offset += start * stride
            kept_labels.append(label)
            sizes.append(count)
            strides.append(stride * step)
        else:
            offset += _index(label, size, selector) * stride
    return tuple(kept_labels), Slice(offset, tuple(sizes), tuple(strides))


def _index(label: str, size: int, selector: object) -> int:
    """Normalise an integer selector (negative counts from the end) and check its range."""
    try:
        index = as_int(selector, "index")
    except TypeError:
        raise TypeError(
            f"selection for dimension {label!r} must be an int, slice or range, "
            f"not {type(selector).__name__} ({selector!r})"
        ) from None
    normalised = index + size if index < 0 else index
    if not 0 <= normalised < size:
        raise IndexError(f"index out of range: {index} for dimension {label!r} of size {size}")
    return normalised


def _restrict(label: str, size: int, selector: slice | range) -> tuple[int, int, int]:
    """Return ``(start, count, step)`` of a slice or range selector over ``range(size)``.

    A ``range`` means the same as the ``slice`` with its start, stop and step. An empty result
    has ``start == 0``, so equal selections give equal slices.
    """
    step = 1 if selector.step is None else as_int(selector.step, f"step for {label!r}")
    if step <= 0:
        raise ValueError(f"slice step for dimension {label!r} must be positive, got {step}")
    try:
        start, stop, _ = slice(selector.start, selector.stop, step).indices(size)
    except TypeError as exc:
        raise TypeError(f"bad slice bounds for dimension {label!r}: {exc}") from None
    count = len(range(start, stop, step))
    return (start if count else 0), count, step


def empty_selection(
    labels: tuple[str, ...], sizes: tuple[int, ...], selections: Mapping[str, Selector]
) -> ValueError | None:
    """The error for a ``slice``/``range`` selector that keeps no coordinate, if any: a
    mesh slice keeps at least one member of each dimension (Monarch's "empty range")."""
    for label, size in zip(labels, sizes, strict=True):
        selector = selections.get(label)
        if isinstance(selector, (slice, range)):
            start, stop, step = slice(selector.start, selector.stop, selector.step).indices(size)
            if not range(start, stop, step):
                return ValueError(
                    f"empty range {start}:{stop}:{step}: {label}={selector!r} keeps no "
                    f"coordinate of dimension {label!r} (size {size}); a slice of a mesh "
                    "keeps at least one")
    return None
