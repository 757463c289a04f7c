"""Blocks of a tensor and the byte ranges that move one block's part of another
(``_dataplane/_blocks``): checked against numpy slicing of real arrays."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regency._dataplane._blocks import Block, pieces, runs, split_bounds, staged_box


def read_box(overlap: Block, source: Block, dest: Block, itemsize: int,
             cost: int) -> tuple[Block, bool]:
    """What a plan reads for ``overlap``, and whether it stages it (as ``_make_plan``)."""
    moved = pieces(overlap, source, dest, itemsize)
    box = staged_box(overlap, source, len(moved), itemsize, cost)
    return (overlap, False) if box is None else (box, True)


@st.composite
def tensor_and_block(draw: st.DrawFn) -> tuple[tuple[int, ...], Block]:
    """A global shape and a block of it (of at least one element)."""
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=4)))
    offsets, sizes = [], []
    for s in shape:
        lo = draw(st.integers(0, s - 1))
        offsets.append(lo)
        sizes.append(draw(st.integers(1, s - lo)))
    return shape, Block(tuple(offsets), tuple(sizes))


def gather(memory: np.ndarray, ranges: list[tuple[int, int]]) -> np.ndarray:
    """The bytes of ``ranges`` of ``memory``'s bytes, one after the other."""
    flat = memory.reshape(-1).view(np.uint8)
    return np.concatenate([flat[s:s + n] for s, n in ranges]) if ranges else flat[:0]


@settings(max_examples=300, deadline=None)
@given(tensor_and_block(), st.data())
def test_runs_hold_exactly_the_box_in_row_major_order(tb, data) -> None:
    shape, source = tb
    full = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    memory = np.ascontiguousarray(full[source.slices])  # how the source holds its block
    box = data.draw(_sub_block(source))
    got = gather(memory, runs(box, source, 4)).view(np.int32).reshape(box.shape)
    assert np.array_equal(got, full[box.slices])


def _sub_block(outer: Block) -> st.SearchStrategy[Block]:
    dims = [st.tuples(st.integers(0, s - 1)).flatmap(
        lambda t, s=s: st.tuples(st.just(t[0]), st.integers(1, s - t[0])))
        for s in outer.shape]
    return st.tuples(*dims).map(lambda pairs: Block(
        tuple(o + lo for o, (lo, _) in zip(outer.offsets, pairs, strict=True)),
        tuple(n for _, n in pairs)))


@settings(max_examples=300, deadline=None)
@given(tensor_and_block(), st.data(), st.sampled_from([0, 4, 1 << 10, 1 << 30]))
def test_a_read_is_its_pieces_or_one_range_staged(tb, data, cost) -> None:
    shape, source = tb
    dest = data.draw(_sub_block(Block.whole(shape)))
    overlap = source.intersect(dest)
    if overlap is None:
        return
    box, staged = read_box(overlap, source, dest, 4, cost)
    assert box.intersect(overlap) == overlap
    if staged:
        assert len(runs(box, source, 4)) == 1 and len(pieces(overlap, source, dest, 4)) > 1
        if cost == 0:
            assert box == overlap  # staging is chosen for nothing read in vain only
    else:
        assert box == overlap


@settings(max_examples=300, deadline=None)
@given(tensor_and_block(), st.data())
def test_pieces_move_a_box_between_two_layouts_exactly(tb, data) -> None:
    shape, source = tb
    dest = data.draw(_sub_block(Block.whole(shape)))
    box = source.intersect(dest)
    if box is None:
        return
    full = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    src = np.ascontiguousarray(full[source.slices]).reshape(-1).view(np.uint8)
    out = np.zeros(dest.shape, dtype=np.int32)
    flat = out.reshape(-1).view(np.uint8)
    moved = pieces(box, source, dest, 4)
    for s, d, n in moved:
        flat[d:d + n] = src[s:s + n]
    assert np.array_equal(out[box.relative_to(dest)], full[box.slices])
    assert sum(n for _, _, n in moved) == 4 * box.numel


def test_ranges_that_touch_are_merged() -> None:
    source = Block.whole((4, 6))
    assert runs(Block((1, 0), (2, 6)), source, 4) == [(24, 48)]  # two whole rows: one range
    assert runs(Block((1, 2), (2, 3)), source, 4) == [(32, 12), (56, 12)]


def test_a_slab_is_read_when_its_extra_bytes_cost_less_than_the_ranges_it_saves() -> None:
    rows = Block((16, 0), (16, 48))              # rank 1 of 4, split by rows
    cols = Block.whole((64, 48)).split(1, 0, 2)  # rank 0 of 2, split by columns
    overlap = rows.intersect(cols)
    assert overlap == Block((16, 0), (16, 24))
    # 16 ranges of 96 bytes, or the 3072-byte slab: 1536 bytes for nothing, 15 ranges saved
    assert read_box(overlap, rows, cols, 4, 1 << 10) == (rows, True)
    assert read_box(overlap, rows, cols, 4, 100) == (overlap, False)
    assert pieces(overlap, rows, cols, 4)[:2] == [(0, 1536, 96), (192, 1632, 96)]


def test_what_is_contiguous_at_the_source_but_scattered_in_place_is_staged() -> None:
    cols = Block.whole((64, 48)).split(1, 1, 4)      # a column shard
    rows = Block.whole((64, 48)).split(0, 0, 2)      # wanted by rows: 32 ranges in place
    overlap = cols.intersect(rows)
    assert len(pieces(overlap, cols, rows, 4)) == 32
    assert read_box(overlap, cols, rows, 4, 1) == (overlap, True)  # one range, nothing wasted
    assert read_box(overlap, cols, Block.whole((64, 48)).split(1, 1, 4), 4, 1 << 20) == (
        overlap, False)  # the same layout: one range straight into place


def test_a_scalar_is_one_range() -> None:
    scalar = Block.whole(())
    assert scalar.numel == 1 and runs(scalar, scalar, 8) == [(0, 8)]
    assert pieces(scalar, scalar, scalar, 8) == [(0, 0, 8)]
    assert read_box(scalar, scalar, scalar, 8, 4096) == (scalar, False)


@given(st.integers(0, 100), st.integers(1, 12))
def test_split_bounds_tile_the_range_in_near_equal_parts(size: int, parts: int) -> None:
    bounds = [split_bounds(size, i, parts) for i in range(parts)]
    assert bounds[0][0] == 0 and bounds[-1][1] == size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    lengths = [hi - lo for lo, hi in bounds]
    assert max(lengths) - min(lengths) <= 1
    assert lengths == [len(p) for p in np.array_split(np.arange(size), parts)]


def test_split_composes_over_dims_and_names_what_is_wrong() -> None:
    b = Block.whole((10, 6)).split(0, 1, 3).split(-1, 1, 2)
    assert b == Block((4, 3), (3, 3)) and str(b) == "[4:7, 3:6]"
    assert b.slices == (slice(4, 7), slice(3, 6))
    with pytest.raises(ValueError, match=r"index 3 is not in range\(3\)"):
        Block.whole((10,)).split(0, 3, 3)
    with pytest.raises(ValueError, match="dim 2 is out of range for a 2-D block"):
        b.split(2, 0, 2)
    with pytest.raises(ValueError, match="one offset per dimension"):
        Block((0,), (1, 2))
    with pytest.raises(TypeError, match="integers"):
        Block((0.5,), (2,))
    assert Block.whole([np.int64(3)]).shape == (3,)


def test_intersections_and_relative_indexes() -> None:
    a, b = Block((0, 0), (4, 4)), Block((2, 3), (4, 4))
    assert a.intersect(b) == Block((2, 3), (2, 1))
    assert a.intersect(Block((4, 0), (1, 4))) is None
    assert Block((2, 3), (2, 1)).relative_to(b) == (slice(0, 2), slice(0, 1))
    assert Block((1, 1), (2, 2)).within((3, 3)) and not Block((1, 1), (2, 3)).within((3, 3))


def test_over_sockets_half_rows_go_in_place_short_ones_are_staged() -> None:
    """With a request of many ranges (READV), a socket range costs little: the weight
    sync's half rows of 8 KiB go straight into place, not as whole rows; half rows of 1 KiB
    are still staged."""
    from regency._dataplane._reshard_plan import _RANGE_COST

    rows = Block.whole((4096, 4096)).split(0, 0, 4)  # a trainer's rows
    half = Block.whole((4096, 4096)).split(1, 0, 2)  # a generator's columns
    overlap = rows.intersect(half)
    for transport in ("tcp", "unix"):
        assert read_box(overlap, rows, half, 4, _RANGE_COST[transport])[1] is False
    short_rows = Block.whole((64, 512)).split(0, 0, 2)
    short_half = Block.whole((64, 512)).split(1, 0, 2)
    short = short_rows.intersect(short_half)  # 32 ranges of 1 KiB: a slab wastes 1 KiB each
    for transport in ("tcp", "unix"):
        assert read_box(short, short_rows, short_half, 4, _RANGE_COST[transport])[1] is True
