"""Example tests for the pure mesh algebra: every operation, error message and format."""

from __future__ import annotations

import pickle
import re
from collections.abc import Mapping

import pytest

from regency._mesh import Extent, MeshTrait, Point, Shape, Slice


def grid(*sizes: int, labels: str = "abcd") -> Shape:
    return Shape.from_sizes(list(labels[: len(sizes)]), sizes)


# --------------------------------------------------------------------------------------------
# Extent


def test_extent_is_an_ordered_mapping() -> None:
    e = Extent(["a", "b"], [2, 3])
    assert isinstance(e, Mapping)
    assert e.labels == ["a", "b"]  # lists, as Monarch's
    assert e.sizes == [2, 3]
    e.labels.append("c")  # a copy: the extent does not change
    assert e.labels == ["a", "b"]
    assert e.nelements == 6
    assert e["b"] == 3
    assert list(e) == ["a", "b"]
    assert len(e) == 2
    assert dict(e) == {"a": 2, "b": 3}
    assert "a" in e and "z" not in e
    with pytest.raises(KeyError):
        e["z"]


def test_extent_formats() -> None:
    e = Extent(["a", "b"], [2, 3])
    assert str(e) == "{a: 2, b: 3}"
    assert repr(e) == "Extent({a: 2, b: 3})"
    assert str(Extent([], [])) == "{}"
    assert repr(Extent([], [])) == "Extent({})"


def test_extent_zero_dims_has_one_element() -> None:
    assert Extent([], []).nelements == 1
    assert Extent(["a"], [0]).nelements == 0


def test_extent_equality_hash_and_order() -> None:
    e = Extent(["a", "b"], [2, 3])
    assert e == Extent(("a", "b"), (2, 3))
    assert hash(e) == hash(Extent(("a", "b"), (2, 3)))
    assert e != Extent(["b", "a"], [3, 2])
    assert e != {"a": 2, "b": 3}
    assert {e: 1}[Extent(["a", "b"], [2, 3])] == 1


def test_extent_pickles() -> None:
    e = Extent(["host", "gpu"], [2, 4])
    assert pickle.loads(pickle.dumps(e)) == e


def test_extent_is_immutable() -> None:
    e = Extent(["a"], [2])
    with pytest.raises(AttributeError, match="immutable"):
        e._sizes = (3,)
    with pytest.raises(AttributeError, match="immutable"):
        del e._labels


@pytest.mark.parametrize(
    ("labels", "sizes", "error", "message"),
    [
        (["a", "b"], [2], ValueError, "label/sizes dimension mismatch: 2 != 1 (got 2 labels"),
        (["a", "a"], [2, 3], ValueError, "duplicate dimension label 'a'"),
        ([""], [2], ValueError, "labels[0] must be a non-empty string"),
        ([1], [2], TypeError, "labels[0] must be a str, not int"),
        ("ab", [2, 3], TypeError, "not a single string 'ab'"),
        (["a"], [-1], ValueError, "sizes[0] must be >= 0, got -1"),
        (["a"], [2.0], TypeError, "sizes[0] must be an int, not float"),
        (["a"], [True], TypeError, "sizes[0] must be an int, not bool"),
        (["a"], 3, TypeError, "sizes must be a sequence of ints, not int"),
    ],
)
def test_extent_validation(labels: object, sizes: object, error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        Extent(labels, sizes)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Point


def test_point_is_a_row_major_mapping() -> None:
    e = Extent(["a", "b"], [2, 3])
    p = Point(5, e)
    assert isinstance(p, Mapping)
    assert p.rank == 5
    assert p.extent == e
    assert dict(p) == {"a": 1, "b": 2}
    assert [dict(Point(r, e)) for r in range(3)] == [
        {"a": 0, "b": 0},
        {"a": 0, "b": 1},
        {"a": 0, "b": 2},
    ]
    assert p.size("a") == 2
    assert p["b"] == 2
    assert len(p) == 2
    with pytest.raises(KeyError):
        p["z"]
    with pytest.raises(KeyError):
        p.size("z")


def test_point_repr() -> None:
    assert repr(Point(4, Extent(["a", "b"], [2, 3]))) == "{'a': 1/2, 'b': 1/3}"
    assert repr(Point(0, Extent([], []))) == "{}"


def test_point_equality_hash_pickle() -> None:
    e = Extent(["a", "b"], [2, 3])
    p = Point(4, e)
    assert p == Point(4, Extent(["a", "b"], [2, 3]))
    assert hash(p) == hash(Point(4, e))
    assert p != Point(3, e)
    assert p != {"a": 1, "b": 1}
    assert pickle.loads(pickle.dumps(p)) == p
    with pytest.raises(AttributeError, match="immutable"):
        p._rank = 0


def test_point_zero_dim() -> None:
    p = Point(0, Extent([], []))
    assert dict(p) == {}
    assert p.rank == 0


@pytest.mark.parametrize("rank", [-1, 6, 100])
def test_point_rank_out_of_range(rank: int) -> None:
    with pytest.raises(IndexError, match=re.escape(f"rank {rank} out of range")):
        Point(rank, Extent(["a", "b"], [2, 3]))
    with pytest.raises(ValueError, match=re.escape(  # Monarch's type and words too
            f"out of range: total ranks 6; does not contain rank {rank}")):
        Point(rank, Extent(["a", "b"], [2, 3]))


def test_str_of_a_shape_is_monarchs() -> None:
    assert str(Shape.from_sizes(["h", "g"], [2, 3])) == "{h=2,g=3}"
    assert str(Shape.unity()) == "{}"
    assert repr(Shape.unity()).startswith("Shape(labels=()")  # repr keeps the slice


def test_point_bad_arguments() -> None:
    with pytest.raises(TypeError, match="extent must be an Extent, not dict"):
        Point(0, {"a": 2})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rank must be an int, not str"):
        Point("0", Extent(["a"], [2]))  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="out of range"):
        Point(0, Extent(["a"], [0]))


def test_point_from_coords() -> None:
    e = Extent(["a", "b"], [2, 3])
    assert Point.from_coords({"b": 2, "a": 1}, e) == Point(5, e)
    assert Point.from_coords({}, Extent([], [])) == Point(0, Extent([], []))
    with pytest.raises(KeyError, match="missing dimension 'b'"):
        Point.from_coords({"a": 1}, e)
    with pytest.raises(KeyError, match=re.escape("has no dimension(s) ['c']")):
        Point.from_coords({"a": 1, "b": 0, "c": 0}, e)
    with pytest.raises(IndexError, match="coordinate 3 out of range for dimension 'b' of size 3"):
        Point.from_coords({"a": 1, "b": 3}, e)
    with pytest.raises(IndexError, match="coordinate -1 out of range for dimension 'a'"):
        Point.from_coords({"a": -1, "b": 0}, e)


# --------------------------------------------------------------------------------------------
# Slice


def test_slice_row_major() -> None:
    s = Slice.new_row_major([2, 3])
    assert s == Slice(0, (2, 3), (3, 1))
    assert len(s) == 6
    assert s.ndim == 2
    assert s.ranks() == list(range(6))
    assert list(s) == list(range(6))
    assert s.is_contiguous()
    assert s.coordinates(4) == (1, 1)


def test_slice_strided_view() -> None:
    s = Slice(offset=1, sizes=(2, 2), strides=(4, 2))
    assert s.ranks() == [1, 3, 5, 7]
    assert [s.global_rank(i) for i in range(4)] == [1, 3, 5, 7]
    assert [s.local_rank(g) for g in (1, 3, 5, 7)] == [0, 1, 2, 3]
    assert not s.is_contiguous()
    for missing in (0, 2, 4, 8, 9, -1):
        with pytest.raises(ValueError, match=f"global rank {missing} is not in Slice"):
            s.local_rank(missing)


def test_slice_accepts_lists_and_stores_tuples() -> None:
    s = Slice(offset=0, sizes=[2, 2], strides=[2, 1])  # type: ignore[arg-type]
    assert s.sizes == (2, 2) and s.strides == (2, 1)
    assert hash(s) == hash(Slice(0, (2, 2), (2, 1)))


def test_slice_zero_dim_and_empty() -> None:
    unit = Slice(7, (), ())
    assert len(unit) == 1
    assert unit.ranks() == [7]
    assert unit.global_rank(0) == 7
    assert unit.local_rank(7) == 0
    assert unit.coordinates(0) == ()
    empty = Slice(0, (2, 0), (1, 1))
    assert len(empty) == 0
    assert empty.ranks() == []
    assert empty.is_contiguous()
    with pytest.raises(ValueError, match="not in"):
        empty.local_rank(0)
    with pytest.raises(IndexError):
        empty.global_rank(0)


def test_slice_non_nested_layout_falls_back_to_scan() -> None:
    # sizes (3, 2) strides (2, 3): ranks 0 3 2 5 4 7 -- injective but not nested.
    s = Slice(0, (3, 2), (2, 3))
    assert s.ranks() == [0, 3, 2, 5, 4, 7]
    assert [s.local_rank(g) for g in s.ranks()] == list(range(6))
    with pytest.raises(ValueError, match="not in"):
        s.local_rank(1)


def test_slice_contiguity_ignores_unit_dims() -> None:
    assert Slice(3, (1, 4), (100, 1)).is_contiguous()
    assert not Slice(0, (2, 2), (1, 2)).is_contiguous()


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((0, (2,), (1, 1)), ValueError, "got 1 sizes (2,) but 2 strides (1, 1)"),
        ((-1, (2,), (1,)), ValueError, "offset must be >= 0, got -1"),
        ((0, (-2,), (1,)), ValueError, "sizes[0] must be >= 0, got -2"),
        ((0, (2,), (0,)), ValueError, "strides[0] must be >= 1, got 0"),
        ((0.5, (2,), (1,)), TypeError, "offset must be an int, not float"),
    ],
)
def test_slice_validation(args: tuple[object, ...], error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        Slice(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize("local", [-1, 4])
def test_slice_local_rank_out_of_range(local: int) -> None:
    s = Slice.new_row_major([2, 2])
    with pytest.raises(IndexError, match=f"local rank {local} out of range for 4 element"):
        s.global_rank(local)
    with pytest.raises(IndexError, match="out of range"):
        s.coordinates(local)


def test_slice_is_frozen_and_pickles() -> None:
    s = Slice(2, (2, 3), (6, 2))
    assert pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(AttributeError):
        s.offset = 3  # type: ignore[misc]


# --------------------------------------------------------------------------------------------
# Shape basics


def test_shape_basics() -> None:
    s = Shape.from_sizes(["host", "gpu"], [2, 4])
    assert s.labels == ("host", "gpu")
    assert s.extent == Extent(["host", "gpu"], [2, 4])
    assert s.ndim == 2
    assert len(s) == 8
    assert s.ranks() == list(range(8))
    assert s.point(5) == Point(5, s.extent)
    assert dict(s.point(5)) == {"host": 1, "gpu": 1}
    assert s.global_rank(5) == 5
    assert s.local_rank(5) == 5
    with pytest.raises(IndexError):
        s.point(8)


def test_shape_unity() -> None:
    u = Shape.unity()
    assert u == Shape((), Slice(0, (), ()))
    assert len(u) == 1 and u.ndim == 0
    assert u.ranks() == [0]
    assert str(u.extent) == "{}"
    assert dict(u.point(0)) == {}


def test_shape_validation() -> None:
    with pytest.raises(ValueError,
                       match=re.escape("Shape: label/sizes dimension mismatch: 1 != 2")):
        Shape(("a",), Slice.new_row_major([2, 2]))
    with pytest.raises(TypeError, match="Shape needs a Slice, not tuple"):
        Shape(("a",), (0, (2,), (1,)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="duplicate dimension label 'a'"):
        Shape.from_sizes(["a", "a"], [1, 1])
    with pytest.raises(ValueError, match="got 1 labels"):
        Shape.from_sizes(["a"], [1, 1])


def test_shape_accepts_list_labels_and_pickles() -> None:
    s = Shape(["a", "b"], Slice(1, (2, 2), (4, 1)))  # type: ignore[arg-type]
    assert s.labels == ("a", "b")
    assert pickle.loads(pickle.dumps(s)) == s
    assert hash(s) == hash(Shape(("a", "b"), Slice(1, (2, 2), (4, 1))))


# --------------------------------------------------------------------------------------------
# select


def test_select_int_removes_dimension() -> None:
    s = Shape.from_sizes(["host", "gpu"], [2, 4])
    t = s.select(host=1)
    assert t.labels == ("gpu",)
    assert t.ranks() == [4, 5, 6, 7]
    assert dict(t.point(0)) == {"gpu": 0}
    assert t.local_rank(6) == 2


def test_select_every_dimension_gives_zero_dim() -> None:
    s = Shape.from_sizes(["host", "gpu"], [2, 4])
    t = s.select(host=1, gpu=2)
    assert t.ndim == 0
    assert str(t.extent) == "{}"
    assert t.ranks() == [6]
    assert len(t) == 1


def test_select_slice_keeps_dimension() -> None:
    s = Shape.from_sizes(["host", "gpu"], [2, 4])
    t = s.select(gpu=slice(1, 3))
    assert t.labels == ("host", "gpu")
    assert t.extent == Extent(["host", "gpu"], [2, 2])
    assert t.ranks() == [1, 2, 5, 6]
    # Points are local to the slice; global ranks are kept.
    assert dict(t.point(0)) == {"host": 0, "gpu": 0}
    assert t.global_rank(0) == 1


def test_select_range_is_like_slice() -> None:
    s = grid(6)
    assert s.select(a=range(1, 5, 2)) == s.select(a=slice(1, 5, 2))
    assert s.select(a=range(1, 5, 2)).ranks() == [1, 3]


def test_select_negative_indices() -> None:
    s = grid(2, 5)
    assert s.select(b=-1).ranks() == [4, 9]
    assert s.select(b=slice(-2, None)).ranks() == [3, 4, 8, 9]
    assert s.select(a=-2, b=slice(None, -3)).ranks() == [0, 1]


def test_select_step_greater_than_one() -> None:
    s = grid(3)
    t = s.select(a=slice(None, None, 2))
    assert t.ranks() == [0, 2]
    assert t.slice == Slice(0, (2,), (2,))
    assert grid(2, 6).select(b=slice(1, None, 3)).ranks() == [1, 4, 7, 10]


def test_select_empty_range_gives_size_zero() -> None:
    s = grid(2, 3)
    t = s.select(b=slice(3, None))
    assert t.extent == Extent(["a", "b"], [2, 0])
    assert len(t) == 0
    assert t.ranks() == []
    assert t == s.select(b=slice(2, 1))  # empty restrictions are normalised
    with pytest.raises(IndexError, match="index out of range: 0 for dimension 'b' of size 0"):
        t.select(b=0)


def test_select_nothing_is_identity() -> None:
    s = grid(2, 3)
    assert s.select() == s


def test_select_unknown_dimension() -> None:
    s = Shape.from_sizes(["host", "gpu"], [2, 4])
    expected = "mesh does not have dimension 'foo'; its dimensions are ('host', 'gpu')"
    with pytest.raises(ValueError, match=re.escape(expected)):
        s.select(foo=0)


@pytest.mark.parametrize("index", [4, -5, 100])
def test_select_index_out_of_range(index: int) -> None:
    s = Shape.from_sizes(["host", "gpu"], [2, 4])
    message = f"index out of range: {index} for dimension 'gpu' of size 4"
    with pytest.raises(IndexError, match=re.escape(message)):
        s.select(gpu=index)


@pytest.mark.parametrize("step", [0, -1])
def test_select_non_positive_step(step: int) -> None:
    message = f"slice step for dimension 'a' must be positive, got {step}"
    with pytest.raises(ValueError, match=re.escape(message)):
        grid(4).select(a=slice(None, None, step))


def test_select_bad_selector_types() -> None:
    with pytest.raises(TypeError, match="must be an int, slice or range, not str"):
        grid(4).select(a="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be an int, slice or range, not bool"):
        grid(4).select(a=True)
    with pytest.raises(TypeError, match="bad slice bounds for dimension 'a'"):
        grid(4).select(a=slice("x", 2))


def test_select_composes_on_strided_shape() -> None:
    s = grid(2, 3, 4)
    t = s.select(c=slice(None, None, 2)).select(b=slice(1, None), c=1)
    assert t.labels == ("a", "b")
    assert t.ranks() == [6, 10, 18, 22]


# --------------------------------------------------------------------------------------------
# flatten


def test_flatten_dense() -> None:
    s = grid(2, 3).select(a=1)
    t = grid(2, 3).flatten("all")
    assert t == Shape(("all",), Slice(0, (6,), (1,)))
    assert s.flatten("x").ranks() == [3, 4, 5]


def test_flatten_evenly_spaced_strided() -> None:
    t = grid(2, 4).select(b=slice(None, None, 2)).select(a=0)
    assert t.flatten("f").ranks() == [0, 2]
    # Outer stride 4 == inner size 2 * inner stride 2: evenly spaced, so it flattens.
    u = grid(2, 4).select(b=slice(None, None, 2))
    assert u.flatten("f") == Shape(("f",), Slice(0, (4,), (2,)))
    assert u.flatten("f").ranks() == u.ranks() == [0, 2, 4, 6]


def test_flatten_zero_dim_gives_size_one() -> None:
    assert Shape.unity().flatten("x") == Shape(("x",), Slice(0, (1,), (1,)))
    assert grid(2, 3).select(a=1, b=2).flatten("x").ranks() == [5]


def test_flatten_ignores_unit_dimensions() -> None:
    s = grid(3, 1, 2).select(a=slice(1, 2))
    assert s.flatten("f").ranks() == s.ranks() == [2, 3]


def test_flatten_empty() -> None:
    assert grid(2, 3).select(b=slice(0, 0)).flatten("f").ranks() == []


def test_flatten_sparse_mesh_fails() -> None:
    s = grid(2, 4).select(b=slice(1, 3))
    with pytest.raises(ValueError, match="cannot flatten sparse mesh") as info:
        s.flatten("f")
    assert "sizes (2, 2) and strides (4, 1)" in str(info.value)


# --------------------------------------------------------------------------------------------
# split


def test_split_with_inferred_size() -> None:
    s = Shape.from_sizes(["host", "gpu"], [2, 8])
    t = s.split(gpu=("tp", "cp"), cp=2)
    assert t.extent == Extent(["host", "tp", "cp"], [2, 4, 2])
    assert t.slice.strides == (8, 2, 1)
    assert t.ranks() == s.ranks()


def test_split_several_dimensions() -> None:
    s = Shape.from_sizes(["host", "gpu"], [4, 6])
    t = s.split(host=("dp", "pp"), gpu=("tp", "cp"), pp=2, tp=3)
    assert t.extent == Extent(["dp", "pp", "tp", "cp"], [2, 2, 3, 2])
    assert t.ranks() == s.ranks()


def test_split_all_sizes_given() -> None:
    t = grid(6).split(a=("x", "y", "z"), x=1, y=2, z=3)
    assert t.extent == Extent(["x", "y", "z"], [1, 2, 3])


def test_split_strided_dimension() -> None:
    s = grid(8).select(a=slice(None, None, 2))
    t = s.split(a=("x", "y"), y=2)
    assert t.slice == Slice(0, (2, 2), (4, 2))
    assert t.ranks() == s.ranks() == [0, 2, 4, 6]


def test_split_keeping_the_old_name() -> None:
    t = grid(6).split(a=("a", "b"), b=2)
    assert t.extent == Extent(["a", "b"], [3, 2])


def test_split_errors() -> None:
    s = Shape.from_sizes(["host", "gpu"], [2, 8])
    with pytest.raises(ValueError, match="cannot infer the sizes of both 'tp' and 'cp'"):
        s.split(gpu=("tp", "cp"))
    with pytest.raises(ValueError,
                       match=re.escape("Dimension 'gpu' of size 8 is not evenly divided")):
        s.split(gpu=("tp", "cp"), cp=3)
    with pytest.raises(ValueError, match=re.escape("with sizes (2, 2)")):
        s.split(gpu=("tp", "cp"), tp=2, cp=2)
    with pytest.raises(ValueError, match=re.escape("sizes given for ('zz',)")):
        s.split(gpu=("tp", "cp"), cp=2, zz=4)
    with pytest.raises(ValueError, match="duplicate dimension label 'host'"):
        s.split(gpu=("host", "cp"), cp=2)
    with pytest.raises(ValueError, match="must be a sequence of new dimension names"):
        s.split(gpu="tp")
    with pytest.raises(ValueError, match="'gpux' is not a dimension of this mesh"):
        s.split(gpux=("a", "b"))
    with pytest.raises(ValueError, match="size of 'cp' must be >= 0"):
        s.split(gpu=("tp", "cp"), cp=-2)
    with pytest.raises(ValueError, match="at least one name"):
        s.split(gpu=())
    with pytest.raises(TypeError, match="must be a str"):
        s.split(gpu=("tp", 3))  # type: ignore[arg-type]


def test_split_size_zero() -> None:
    s = grid(2, 0)
    assert s.split(b=("x", "y"), y=3).extent == Extent(["a", "x", "y"], [2, 0, 3])
    with pytest.raises(ValueError, match="multiply to 0"):
        s.split(b=("x", "y"), y=0)


# --------------------------------------------------------------------------------------------
# rename


def test_rename() -> None:
    s = Shape.from_sizes(["host", "gpu"], [2, 4]).select(gpu=slice(1, None))
    t = s.rename(host="node")
    assert t.labels == ("node", "gpu")
    assert t.slice == s.slice
    assert s.rename(host="gpu", gpu="host").labels == ("gpu", "host")
    assert s.rename() == s


def test_rename_errors() -> None:
    s = Shape.from_sizes(["host", "gpu"], [2, 4])
    with pytest.raises(ValueError, match="mesh does not have dimension 'x'"):
        s.rename(x="y")
    with pytest.raises(ValueError, match="duplicate dimension label 'gpu'"):
        s.rename(host="gpu")
    with pytest.raises(TypeError, match="new name for 'host' must be a str"):
        s.rename(host=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        s.rename(host="")


# --------------------------------------------------------------------------------------------
# MeshTrait


class Box(MeshTrait):
    """A minimal mesh: a shape held as a plain attribute, plus a tag that must survive."""

    _shape: Shape  # declared, so type checkers accept the assignment below

    def __init__(self, shape: Shape, tag: str = "box") -> None:
        self._shape = shape
        self.tag = tag

    def _new_with_shape(self, shape: Shape) -> Box:
        return Box(shape, self.tag)


class PropBox(MeshTrait):
    """A mesh whose shape is a property."""

    def __init__(self, shape: Shape) -> None:
        self._inner = shape

    @property
    def _shape(self) -> Shape:
        return self._inner

    def _new_with_shape(self, shape: Shape) -> PropBox:
        return PropBox(shape)


def test_mesh_trait_operations() -> None:
    m = Box(Shape.from_sizes(["host", "gpu"], [2, 4]), tag="t")
    assert len(m) == 8
    assert m.ndim == 2
    assert m.extent == Extent(["host", "gpu"], [2, 4])
    assert m.sizes == {"host": 2, "gpu": 4}
    assert m.size() == 8
    assert m.size("gpu") == 4
    assert m.size(["host", "gpu"]) == 8
    assert m.size([]) == 1
    sliced = m.slice(gpu=slice(0, 4, 2))
    assert isinstance(sliced, Box) and sliced.tag == "t"
    assert sliced._shape.ranks() == [0, 2, 4, 6]
    assert m.slice(host=1).sizes == {"gpu": 4}
    assert m.flatten("all").sizes == {"all": 8}
    assert m.split(gpu=("a", "b"), b=2).sizes == {"host": 2, "a": 2, "b": 2}
    assert m.rename(gpu="device").sizes == {"host": 2, "device": 4}
    zero = m.slice(host=0, gpu=0)
    assert zero.sizes == {} and len(zero) == 1 and zero.size() == 1


def test_mesh_trait_with_property_shape() -> None:
    m = PropBox(Shape.from_sizes(["x"], [3]))
    assert m.slice(x=slice(1, None)).sizes == {"x": 2}
    assert len(m) == 3


def test_mesh_trait_size_unknown_dimension() -> None:
    m = Box(Shape.from_sizes(["host", "gpu"], [2, 4]))
    with pytest.raises(KeyError, match="mesh does not have dimension 'foo'"):
        m.size("foo")
    with pytest.raises(KeyError, match="mesh does not have dimension 'foo'"):
        m.size(["host", "foo"])


def test_mesh_trait_errors_propagate() -> None:
    m = Box(Shape.from_sizes(["host", "gpu"], [2, 4]))
    with pytest.raises(ValueError, match="mesh does not have dimension 'foo'"):
        m.slice(foo=1)
    with pytest.raises(TypeError, match="mesh does not have dimension 'foo'"):  # Monarch's type
        m.slice(foo=1)
    with pytest.raises(IndexError, match="index out of range: 2 for dimension 'host' of size 2"):
        m.slice(host=2)


def test_mesh_trait_requires_new_with_shape() -> None:
    class Bare(MeshTrait):
        _shape = Shape.from_sizes(["a"], [2])

    with pytest.raises(NotImplementedError, match="Bare must implement _new_with_shape"):
        Bare().slice(a=0)
    assert len(Bare()) == 2


def test_mesh_trait_has_no_getitem() -> None:
    m = Box(Shape.from_sizes(["a"], [2]))
    assert not hasattr(MeshTrait, "__getitem__")
    with pytest.raises(TypeError):
        m[0]  # type: ignore[index]


def test_a_missing_dimension_of_a_point_or_extent_is_a_key_and_value_error() -> None:
    """Monarch raises ``ValueError: Dimension 'z' not found``; a mapping raises KeyError
    (which ``get`` turns into its default): regency's error is both."""
    extent = Extent(["h", "g"], [2, 3])
    point = Point(4, extent)
    for mapping in (point, extent):
        for kind in (KeyError, ValueError):
            with pytest.raises(kind, match=r"Dimension 'z' not found; the dimensions are"):
                mapping["z"]
        assert mapping.get("z", -1) == -1
