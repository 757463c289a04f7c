"""Reshaping a labelled `Slice` without changing its ranks: flatten, split and rename.

None of these operations moves a rank: ``ranks()`` is the same list before and after. They only
regroup the dimensions that enumerate it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise

from regency._mesh._checks import as_int, as_labels, unknown_dimension
from regency._mesh._rowmajor import row_major_strides
from regency._mesh._slice import Slice


def flatten(labels: tuple[str, ...], view: Slice, name: str) -> tuple[tuple[str, ...], Slice]:
    """Merge every dimension of ``(labels, view)`` into one dimension called ``name``.

    This works whenever the ranks are evenly spaced, i.e. one stride describes them all: dense
    meshes, but also e.g. every other rank of a dense mesh.

    Raises:
        ValueError: the ranks are not evenly spaced ("cannot flatten sparse mesh ...").
    """
    total = len(view)
    nontrivial = [(s, t) for s, t in zip(view.sizes, view.strides, strict=True) if s != 1]
    if total == 0:
        return (name,), Slice(view.offset, (0,), (1,))
    for (_, outer_stride), (inner_size, inner_stride) in pairwise(nontrivial):
        if outer_stride != inner_size * inner_stride:
            raise ValueError(
                f"cannot flatten sparse mesh with dimensions {labels}, sizes {view.sizes} and "
                f"strides {view.strides}: its ranks are not evenly spaced"
            )
    stride = nontrivial[-1][1] if nontrivial else 1
    return (name,), Slice(view.offset, (total,), (stride,))


def split(
    labels: tuple[str, ...], view: Slice, arguments: Mapping[str, Sequence[str] | int]
) -> tuple[tuple[str, ...], Slice]:
    """Split dimensions of ``(labels, view)`` into several, as in Monarch's ``mesh.split``.

    A keyword that names an existing dimension maps it to the sequence of new labels that
    replace it (outermost first); any other keyword gives the size of a new label. Within one
    split, at most one new label may omit its size; it is inferred. Dimensions that are not
    mentioned stay as they are.

    Example: ``split(host=("dp", "pp"), pp=4)`` turns ``{host: 8}`` into ``{dp: 2, pp: 4}``.

    Raises:
        ValueError: a bad argument, two unknown sizes in one split, sizes that do not multiply
            to the dimension's size, a duplicate resulting label, or an unused size.
        TypeError: a new label is not a string.
    """
    splits, sizes_given = _parse_split(labels, arguments)
    new_labels = as_labels(
        (new for label in labels for new in splits.get(label, (label,))), "split result"
    )
    unused = dict(sizes_given)
    sizes: list[int] = []
    strides: list[int] = []
    for label, size, stride in zip(labels, view.sizes, view.strides, strict=True):
        parts = splits.get(label, (label,))
        part_sizes = _part_sizes(label, size, parts, sizes_given)
        for part in parts:
            unused.pop(part, None)
        sizes.extend(part_sizes)
        strides.extend(stride * step for step in row_major_strides(part_sizes))
    if unused:
        raise ValueError(
            f"split: sizes given for {tuple(unused)} but no split dimension produces them"
        )
    return new_labels, Slice(view.offset, tuple(sizes), tuple(strides))


def rename(
    labels: tuple[str, ...], view: Slice, names: Mapping[str, str]
) -> tuple[tuple[str, ...], Slice]:
    """Rename dimensions (old label -> new label); unmentioned dimensions keep their labels.

    Raises:
        ValueError: an old label is not a dimension, or the result has a duplicate label.
        TypeError: a new label is not a string.
    """
    for old, new in names.items():
        if old not in labels:
            raise unknown_dimension(old, labels)
        if not isinstance(new, str):
            raise TypeError(f"rename: new name for {old!r} must be a str, not {new!r}")
    return as_labels((names.get(label, label) for label in labels), "rename result"), view


def _parse_split(
    labels: tuple[str, ...], arguments: Mapping[str, Sequence[str] | int]
) -> tuple[dict[str, tuple[str, ...]], dict[str, int]]:
    """Sort split keywords into (dimension -> new labels) and (new label -> size)."""
    splits: dict[str, tuple[str, ...]] = {}
    sizes: dict[str, int] = {}
    for key, value in arguments.items():
        if key in labels:
            if isinstance(value, (str, int)):
                raise ValueError(
                    f"split: {key!r} is a dimension of this mesh, so its value must be a "
                    f"sequence of new dimension names, not {value!r}"
                )
            parts = as_labels(value, f"split({key}=...)")
            if not parts:
                raise ValueError(f"split: dimension {key!r} must be split into at least one name")
            splits[key] = parts
        else:
            try:
                size = as_int(value, key)
            except TypeError:
                raise ValueError(
                    f"split: {key!r} is not a dimension of this mesh (its dimensions are "
                    f"{labels}), so its value must be the int size of a new dimension, "
                    f"not {value!r}"
                ) from None
            if size < 0:
                raise ValueError(f"split: size of {key!r} must be >= 0, got {size}")
            sizes[key] = size
    return splits, sizes


def _part_sizes(
    label: str, size: int, parts: tuple[str, ...], sizes_given: Mapping[str, int]
) -> list[int]:
    """Return the sizes of ``parts`` that together replace dimension ``label`` of ``size``."""
    unknown = [part for part in parts if part not in sizes_given]
    if len(unknown) > 1:
        raise ValueError(
            f"split: cannot infer the sizes of both {unknown[0]!r} and {unknown[1]!r} from "
            f"dimension {label!r}; give all but one, e.g. {unknown[1]}=..."
        )
    known = 1
    for part in parts:
        known *= sizes_given.get(part, 1)
    if unknown and not known:
        raise ValueError(
            f"split: cannot infer the size of {unknown[0]!r} when the other sizes of "
            f"dimension {label!r} multiply to 0"
        )
    inferred = size // known if known else 0
    if (unknown and inferred * known != size) or (not unknown and known != size):
        shown = tuple(sizes_given.get(part, "?") for part in parts)
        raise ValueError(
            f"Dimension {label!r} of size {size} is not evenly divided by {parts} "
            f"with sizes {shown} (split)"
        )
    return [sizes_given.get(part, inferred) for part in parts]
