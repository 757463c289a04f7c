"""Shared-memory segments for large frame buffers: lending, giving back, mapping, refusing."""

from __future__ import annotations

import fcntl
import gc
import os

import pytest

from regency._transport import _shm


def views(*sizes: int, fill: int = 7) -> list[memoryview]:
    return [memoryview(bytes([fill]) * n) for n in sizes]


def fds_open() -> int:
    return len(os.listdir("/proc/self/fd"))


def receive(lent: _shm.Lent) -> tuple[list[memoryview], list[int]]:
    """What the receiving side makes of a lent segment (its own dup of the descriptor)."""
    released: list[int] = []
    fds = [os.dup(lent.fd)]
    got = _shm.resolve([memoryview(d) for d in lent.descriptors],
                       lambda: fds.pop() if fds else None, released.append)
    return got, released


def test_lend_copies_each_buffer_into_one_segment_the_receiver_maps():
    pool = _shm.SegmentPool(capacity=64 << 20)
    lent = pool.lend(views(3 << 20, 5000, fill=9), borrower="conn")
    assert not lent.owned and lent.token
    got, _ = receive(lent)
    assert [v.nbytes for v in got] == [3 << 20, 5000]
    assert set(bytes(got[0][:10])) == {9} and set(bytes(got[1])) == {9}


def test_received_views_are_private_copy_on_write():
    pool = _shm.SegmentPool(capacity=64 << 20)
    lent = pool.lend(views(1 << 20), borrower="conn")
    first, _ = receive(lent)
    second, _ = receive(lent)
    assert not first[0].readonly
    first[0][0] = 1  # a write stays in this mapping
    assert second[0][0] == 7


def test_a_segment_comes_back_when_the_mapping_dies_and_is_reused():
    pool = _shm.SegmentPool(capacity=64 << 20)
    lent = pool.lend(views(2 << 20), borrower="conn")
    got, released = receive(lent)
    again = pool.lend(views(2 << 20), borrower="conn")
    assert again.token != lent.token  # the first one is still lent
    del got
    gc.collect()
    assert released == [lent.token]
    pool.release(released, "conn")
    third = pool.lend(views(2 << 20), borrower="conn")
    assert third.token == lent.token
    assert pool.held_bytes() == 4 << 20


def test_release_by_another_borrower_is_ignored():
    pool = _shm.SegmentPool(capacity=64 << 20)
    lent = pool.lend(views(1 << 20), borrower="a")
    pool.release([lent.token], "b")
    assert pool.lend(views(1 << 20), borrower="a").token != lent.token


def test_segments_of_a_lost_borrower_are_dropped_not_reused():
    pool = _shm.SegmentPool(capacity=64 << 20)
    kept = pool.lend(views(1 << 20), borrower="a")
    gone = pool.lend(views(1 << 20), borrower="b")
    pool.release([kept.token], "a")
    gone.close()  # sent: only the pool holds it now
    before = fds_open()
    pool.forget("b")
    assert fds_open() == before - 2  # its descriptor and the mapping's own
    assert pool.held_bytes() == 1 << 20
    assert pool.lend(views(1 << 20), borrower="c").token == kept.token


def test_over_capacity_a_sealed_one_off_segment_is_used():
    pool = _shm.SegmentPool(capacity=2 << 20)
    lent = pool.lend(views(3 << 20), borrower="conn")
    assert lent.owned and lent.token == 0
    seals = fcntl.fcntl(lent.fd, fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_WRITE and seals & fcntl.F_SEAL_SHRINK
    got, released = receive(lent)
    lent.close()
    lent.close()  # idempotent
    assert got[0].nbytes == 3 << 20
    del got
    gc.collect()
    assert released == []  # nothing to give back
    assert pool.held_bytes() == 0


def test_free_segments_are_evicted_to_make_room():
    pool = _shm.SegmentPool(capacity=4 << 20)
    a = pool.lend(views(3 << 20), borrower="conn")
    pool.release([a.token], "conn")
    b = pool.lend(views(1 << 20), borrower="conn")  # a is too big to reuse (> 2x)
    assert b.token != a.token and not b.owned
    assert pool.held_bytes() <= 4 << 20


def test_a_segment_that_could_shrink_is_refused():
    fd = os.memfd_create("unsealed", os.MFD_CLOEXEC)
    os.ftruncate(fd, 4096)
    with pytest.raises(_shm.ShmError, match="shrink"):
        _shm.map_segment(fd)


@pytest.mark.parametrize(
    ("descriptor", "needle"),
    [
        (b"short", "bytes"),
        (_shm.DESCRIPTOR.pack(300, 0, 0, 10), "at most"),
        (_shm.DESCRIPTOR.pack(1, 0, 0, 10), "fewer arrived"),
        (_shm.DESCRIPTOR.pack(0, 0, 4096, 1 << 30), "outside"),
    ],
)
def test_bad_descriptors_are_refused(descriptor, needle):
    lent = _shm.SegmentPool(capacity=8 << 20).lend(views(4096), borrower="conn")
    fds = [os.dup(lent.fd)]
    with pytest.raises(_shm.ShmError, match=needle):
        _shm.resolve([memoryview(descriptor)], lambda: fds.pop() if fds else None,
                     lambda token: None)


def test_free_segments_unused_for_a_while_are_trimmed():
    pool = _shm.SegmentPool(capacity=64 << 20)
    kept = pool.lend(views(1 << 20), borrower="conn")
    idle = pool.lend(views(2 << 20), borrower="conn")
    pool.release([idle.token], "conn")
    assert pool.trim(idle=3600) == 0  # came back just now
    assert pool.trim(idle=0) == 2 << 20  # free and idle: dropped
    assert pool.held_bytes() == 1 << 20  # the lent one stays, whatever its age
    assert kept.token
