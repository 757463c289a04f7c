"""A relay's plan for a cast is kept per cast, and always agrees with the tree's geometry."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from regency._mesh import Shape
from regency._runtime._relay import Tree


@st.composite
def trees_and_casts(draw: st.DrawFn) -> tuple[Tree, Shape, int, set[str]]:
    rows = draw(st.integers(1, 6))
    cols = draw(st.integers(1, 6))
    full = Shape.from_sizes(["r", "c"], [rows, cols])
    fanout = draw(st.integers(1, 5))
    tree = Tree(full.ranks(), [f"unix:@p{g}" for g in full.ranks()], fanout)
    r0 = draw(st.integers(0, rows - 1))
    c0 = draw(st.integers(0, cols - 1))
    sub = full.select(r=slice(r0, draw(st.integers(r0 + 1, rows))),
                      c=slice(c0, draw(st.integers(c0 + 1, cols))))
    me = draw(st.sampled_from(full.ranks()))
    dead = draw(st.sets(st.sampled_from(tree.addrs), max_size=3))
    dead.discard(tree.addrs[tree.pos_of[me]])
    return tree, sub, me, dead


@settings(max_examples=150, deadline=None)
@given(case=trees_and_casts())
def test_a_relays_plan_agrees_with_next_hops_and_is_target_every_time(
        case: tuple[Tree, Shape, int, set[str]]) -> None:
    tree, sub, me, dead = case
    cast = (sub.labels, sub.slice.offset, sub.slice.sizes, sub.slice.strides)
    expected = (tree.next_hops(tree.pos_of[me], cast, dead), tree.is_target(me, cast))
    for _ in range(2):  # worked out, then remembered
        hops, mine = tree.relay(me, cast, dead)
        assert (list(hops), mine) == expected
    hops, _ = tree.relay(me, cast, ())  # the same cast once nobody is dead
    assert list(hops) == tree.next_hops(tree.pos_of[me], cast, ())
