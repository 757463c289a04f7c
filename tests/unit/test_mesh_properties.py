"""Property tests for the mesh algebra: slicing laws checked against a brute-force grid model.

The model keeps, for every element of a shape, its coordinates and global rank, and applies a
selection by filtering and re-indexing those coordinates with Python's own list slicing. It
shares no code with `regency._mesh`, so agreement means the strided arithmetic is right.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from regency._mesh import Point, Selector, Shape

PROFILE = settings(max_examples=60, deadline=None)

LABEL_POOL = ["a", "b", "c", "d", "host", "gpu", "x", "y"]

# A model of a shape: labels, sizes, and global ranks in row-major order of coordinates.
Model = tuple[tuple[str, ...], tuple[int, ...], list[int]]


@st.composite
def base_shapes(draw: st.DrawFn) -> Shape:
    """Dense row-major shapes of 1-4 dimensions of size 1-5 with random labels."""
    labels = draw(st.lists(st.sampled_from(LABEL_POOL), min_size=1, max_size=4, unique=True))
    sizes = draw(st.lists(st.integers(1, 5), min_size=len(labels), max_size=len(labels)))
    return Shape.from_sizes(labels, sizes)


def selectors(size: int, *, allow_int: bool = True) -> st.SearchStrategy[Selector]:
    """Any selector valid for a dimension of ``size``: int, slice or range."""
    bound = st.one_of(st.none(), st.integers(-size - 2, size + 2))
    step = st.one_of(st.none(), st.integers(1, 3))
    options: list[st.SearchStrategy[Selector]] = [
        st.builds(slice, bound, bound, step),
        st.builds(range, st.integers(0, size + 1), st.integers(0, size + 1), st.integers(1, 3)),
    ]
    if allow_int and size > 0:
        options.append(st.integers(-size, size - 1))
    return st.one_of(options)


@st.composite
def selections(draw: st.DrawFn, shape: Shape) -> dict[str, Selector]:
    """A random selection over a random subset of ``shape``'s dimensions."""
    if not shape.labels:
        return {}
    chosen = draw(st.lists(st.sampled_from(shape.labels), unique=True))
    return {label: draw(selectors(shape.extent[label])) for label in chosen}


@st.composite
def sliced_shapes(draw: st.DrawFn) -> Shape:
    """A base shape, possibly with one strided slice-only selection applied (no empties)."""
    shape = draw(base_shapes())
    chosen = draw(st.lists(st.sampled_from(shape.labels), unique=True))
    restrict: dict[str, Selector] = {}
    for label in chosen:
        size = shape.extent[label]
        start = draw(st.integers(0, size - 1))
        restrict[label] = slice(start, draw(st.integers(start + 1, size)), draw(st.integers(1, 3)))
    return shape.select(**restrict)


def model_of(shape: Shape) -> Model:
    """Brute force: the global rank of every coordinate tuple, enumerated row-major."""
    sizes = shape.slice.sizes
    ranks = [
        shape.slice.offset + sum(c * s for c, s in zip(coords, shape.slice.strides, strict=True))
        for coords in itertools.product(*(range(n) for n in sizes))
    ]
    return shape.labels, sizes, ranks


def model_select(model: Model, selection: Mapping[str, Selector]) -> Model:
    """Apply ``selection`` to a model by filtering the coordinate grid."""
    labels, sizes, ranks = model
    # For each dimension: the kept old indices, and whether the dimension survives.
    keep: list[list[int]] = []
    survives: list[bool] = []
    for label, size in zip(labels, sizes, strict=True):
        indices = list(range(size))
        sel = selection.get(label)
        if sel is None:
            keep.append(indices)
            survives.append(True)
        elif isinstance(sel, (slice, range)):
            keep.append(indices[slice(sel.start, sel.stop, sel.step)])
            survives.append(True)
        else:
            keep.append([indices[sel]])
            survives.append(False)
    grid = dict(zip(itertools.product(*(range(n) for n in sizes)), ranks, strict=True))
    new_ranks = [grid[coords] for coords in itertools.product(*keep)]
    new_labels = tuple(label for label, s in zip(labels, survives, strict=True) if s)
    new_sizes = tuple(len(k) for k, s in zip(keep, survives, strict=True) if s)
    return new_labels, new_sizes, new_ranks


def assert_matches(shape: Shape, model: Model) -> None:
    assert (shape.labels, shape.slice.sizes, shape.ranks()) == model


@PROFILE
@given(sliced_shapes())
def test_rank_point_round_trip(shape: Shape) -> None:
    extent = shape.extent
    for local in range(len(shape)):
        point = shape.point(local)
        assert point.rank == local
        assert Point.from_coords(dict(point), extent) == point
        assert tuple(point.values()) == shape.slice.coordinates(local)
        assert shape.local_rank(shape.global_rank(local)) == local


@PROFILE
@given(sliced_shapes())
def test_points_enumerate_the_grid_row_major(shape: Shape) -> None:
    coords = [tuple(shape.point(i).values()) for i in range(len(shape))]
    assert coords == list(itertools.product(*(range(n) for n in shape.slice.sizes)))
    assert_matches(shape, model_of(shape))


@PROFILE
@given(st.data())
def test_select_matches_brute_force(data: st.DataObject) -> None:
    shape = data.draw(sliced_shapes())
    selection = data.draw(selections(shape))
    assert_matches(shape.select(**selection), model_select(model_of(shape), selection))


@PROFILE
@given(st.data())
def test_slice_of_slice_matches_brute_force(data: st.DataObject) -> None:
    shape = data.draw(base_shapes())
    first = data.draw(selections(shape))
    middle = shape.select(**first)
    second = data.draw(selections(middle))
    expected = model_select(model_select(model_of(shape), first), second)
    assert_matches(middle.select(**second), expected)


@PROFILE
@given(st.data())
def test_disjoint_selections_compose(data: st.DataObject) -> None:
    shape = data.draw(sliced_shapes())
    selection = data.draw(selections(shape))
    split_at = data.draw(st.integers(0, len(selection)))
    items = list(selection.items())
    first, second = dict(items[:split_at]), dict(items[split_at:])
    assert shape.select(**first).select(**second) == shape.select(**selection)


@PROFILE
@given(sliced_shapes())
def test_local_rank_rejects_ranks_outside(shape: Shape) -> None:
    inside = set(shape.ranks())
    for rank in range(max(inside) + 3):
        if rank in inside:
            assert shape.global_rank(shape.local_rank(rank)) == rank
        else:
            try:
                shape.local_rank(rank)
            except ValueError:
                continue
            raise AssertionError(f"local_rank({rank}) accepted a rank outside {shape}")


def evenly_spaced(ranks: list[int]) -> bool:
    return len({b - a for a, b in itertools.pairwise(ranks)}) <= 1


@PROFILE
@given(st.data())
def test_flatten_preserves_ranks_iff_evenly_spaced(data: st.DataObject) -> None:
    shape = data.draw(base_shapes())
    shape = shape.select(**data.draw(selections(shape)))
    try:
        flat = shape.flatten("flat")
    except ValueError as exc:
        assert "cannot flatten sparse mesh" in str(exc)
        assert not evenly_spaced(shape.ranks())
        return
    assert flat.labels == ("flat",)
    assert flat.ranks() == shape.ranks()
    assert evenly_spaced(shape.ranks())


@PROFILE
@given(base_shapes())
def test_dense_shapes_always_flatten(shape: Shape) -> None:
    assert shape.flatten("f").ranks() == list(range(len(shape)))


@PROFILE
@given(st.data())
def test_split_then_flatten_preserves_ranks(data: st.DataObject) -> None:
    shape = data.draw(sliced_shapes())
    label = data.draw(st.sampled_from(shape.labels))
    size = shape.extent[label]
    inner = data.draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
    outer_name, inner_name = "split_outer", "split_inner"
    arguments: dict[str, Sequence[str] | int] = {label: (outer_name, inner_name), inner_name: inner}
    split = shape.split(**arguments)
    assert split.ranks() == shape.ranks()
    assert len(split) == len(shape)
    position = shape.labels.index(label)
    expected_labels = (
        *shape.labels[:position],
        outer_name,
        inner_name,
        *shape.labels[position + 1 :],
    )
    assert split.labels == expected_labels
    assert split.extent[outer_name] * split.extent[inner_name] == size
    if evenly_spaced(shape.ranks()):
        assert split.flatten("f").ranks() == shape.flatten("f").ranks() == shape.ranks()


@PROFILE
@given(st.data())
def test_rename_keeps_ranks(data: st.DataObject) -> None:
    shape = data.draw(sliced_shapes())
    new = data.draw(
        st.lists(st.sampled_from(LABEL_POOL), min_size=shape.ndim, max_size=shape.ndim, unique=True)
    )
    renamed = shape.rename(**dict(zip(shape.labels, new, strict=True)))
    assert renamed.labels == tuple(new)
    assert renamed.slice == shape.slice
    assert renamed.ranks() == shape.ranks()
