"""Row-major (C order) index arithmetic: the last dimension varies fastest."""

from __future__ import annotations

from collections.abc import Sequence


def row_major_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Return the dense row-major strides of ``sizes``, e.g. ``(2, 3, 4) -> (12, 4, 1)``.

    A size of 0 counts as 1, so strides stay positive even for an empty grid (which has no
    ranks, so any positive strides describe it).
    """
    strides: list[int] = []
    step = 1
    for size in reversed(sizes):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def product(sizes: Sequence[int]) -> int:
    """Return the number of elements of a grid with ``sizes`` (1 for no dimensions)."""
    total = 1
    for size in sizes:
        total *= size
    return total


def check_index(index: int, count: int, what: str) -> None:
    """Raise ``IndexError`` unless ``0 <= index < count``."""
    if not 0 <= index < count:
        raise IndexError(f"{what} {index} out of range for {count} element(s)")


def unravel(index: int, sizes: Sequence[int]) -> tuple[int, ...]:
    """Return the coordinates of linear ``index`` in a row-major grid of ``sizes``.

    The caller guarantees ``0 <= index < product(sizes)``.
    """
    coords: list[int] = []
    for size in reversed(sizes):
        index, coord = divmod(index, size)
        coords.append(coord)
    return tuple(reversed(coords))


def ravel(coords: Sequence[int], sizes: Sequence[int]) -> int:
    """Return the row-major linear index of ``coords`` in a grid of ``sizes``.

    The caller guarantees ``0 <= coords[i] < sizes[i]``.
    """
    index = 0
    for coord, size in zip(coords, sizes, strict=True):
        index = index * size + coord
    return index
