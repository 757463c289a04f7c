"""ValueMesh: items, values, item(**coords), get(i), slicing, subscripting, pickling."""

from __future__ import annotations

import pickle

import pytest

from regency._api._value_mesh import ValueMesh
from regency._mesh import Point, Shape


def vm() -> ValueMesh[int]:
    return ValueMesh(Shape.from_sizes(["h", "g"], [2, 3]), [0, 1, 2, 10, 11, 12])


def test_items_and_values_in_row_major_order() -> None:
    m = vm()
    assert m.values() == [0, 1, 2, 10, 11, 12]  # a list, as Monarch gives: len, [i], twice
    assert m.slice(h=1).values()[0] == 10
    assert [dict(p) for p, _ in m.items()] == [
        {"h": 0, "g": 0}, {"h": 0, "g": 1}, {"h": 0, "g": 2},
        {"h": 1, "g": 0}, {"h": 1, "g": 1}, {"h": 1, "g": 2},
    ]
    assert len(m) == 6


def test_item_needs_exactly_the_dimensions() -> None:
    m = vm()
    assert m.item(h=1, g=2) == 12
    with pytest.raises(KeyError, match="needs a coordinate"):
        m.item(h=1)
    with pytest.raises(KeyError, match="extra dimensions"):
        m.item(h=1, g=0, x=0)


def test_get_and_subscripting() -> None:
    m = vm()
    assert m.get(4) == 11
    assert m[4] == 11
    assert m[-1] == 12
    assert m[Point(5, m.extent)] == 12
    assert m[{"h": 0, "g": 1}] == 1
    with pytest.raises(IndexError):
        m.get(6)
    with pytest.raises(ValueError, match=r"index 6 out of range \(len=6\)"):  # Monarch's
        m.get(6)
    with pytest.raises(TypeError):
        m["h"]  # type: ignore[index]


def test_slicing_keeps_values_and_relative_points() -> None:
    m = vm().slice(h=1)
    assert list(m.values()) == [10, 11, 12]
    assert m.item(g=0) == 10
    s = vm().slice(g=slice(1, 3))
    assert list(s.values()) == [1, 2, 11, 12]
    assert [dict(p) for p, _ in s.items()][1] == {"h": 0, "g": 1}
    assert list(vm().flatten("r").values()) == [0, 1, 2, 10, 11, 12]


def test_pickle_round_trip_of_a_slice() -> None:
    s = vm().slice(g=2)
    back = pickle.loads(pickle.dumps(s))
    assert list(back.values()) == [2, 12]
    assert back.sizes == {"h": 2}
    assert back == s


def test_wrong_number_of_values() -> None:
    with pytest.raises(ValueError, match="got 1 values"):
        ValueMesh(Shape.from_sizes(["a"], [2]), [1])


def test_repr_shows_extent() -> None:
    assert repr(vm()).startswith("ValueMesh({h: 2, g: 3})")


def test_repr_is_monarchs_one_line_while_it_fits_then_one_member_per_line() -> None:
    short = ValueMesh(Shape.from_sizes(["g"], [2]), ["a", "b"])
    assert repr(short) == "ValueMesh({g: 2}):\n  (({'g': 0/2}, 'a'), ({'g': 1/2}, 'b'))"
    lines = repr(vm()).splitlines()
    assert lines[1:3] == ["  (({'h': 0/2, 'g': 0/3}, 0),", "   ({'h': 0/2, 'g': 1/3}, 1),"]
    assert lines[-1] == "   ({'h': 1/2, 'g': 2/3}, 12))"
    assert len(lines) == 7


@pytest.mark.parametrize(("selector", "words"), [
    (slice(2, 2), "empty range 2:2:1"),
    (slice(2, 0), "empty range 2:0:1"),
    (range(5, 9), "empty range 3:3:1"),
])
def test_a_slice_that_keeps_nothing_is_refused(selector: object, words: str) -> None:
    """Monarch's ValueError and words; an empty mesh would take calls no member answers."""
    with pytest.raises(ValueError, match=words) as info:
        vm().slice(g=selector)  # type: ignore[arg-type]
    assert "dimension 'g' (size 3)" in str(info.value)
