"""Connections over a real Unix socket pair: large buffers through shared memory.

Two :class:`Connection` objects on one event loop (in a thread), talking over
``socket.socketpair()``: frames with shared-memory attachments arrive whole and in order even
when the socket is full and frames queue; segments go back to the sender's pool; a peer that
names a segment it never sent is cut off without hurting the receiver.
"""

from __future__ import annotations

import gc
import os
import socket
from collections.abc import Iterator

import pytest
from _loop_pair import LoopPair

from regency._transport import _shm
from regency._transport._connection import Connection
from regency._wire import encode_frame

pytestmark = pytest.mark.timeout(60)


class Pair(LoopPair):
    """A connected pair of Connections; ``got`` collects frames received by ``b``."""

    def __init__(self, shm_min: int = 1 << 20, sndbuf: int = 1 << 16) -> None:
        super().__init__()
        sa, sb = socket.socketpair()
        for s in (sa, sb):
            s.setblocking(False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        self.pool_a = _shm.SegmentPool(capacity=256 << 20)
        self.pool_b = _shm.SegmentPool(capacity=256 << 20)

        def make() -> tuple[Connection, Connection]:
            a = Connection(sa, self.loop, self.on_frame, self.on_close, label="a",
                           shm_min_bytes=shm_min, shm_pool=self.pool_a)
            b = Connection(sb, self.loop, self.on_frame, self.on_close, label="b",
                           shm_min_bytes=shm_min, shm_pool=self.pool_b)
            a.start()
            b.start()
            return a, b

        self.a, self.b = self.call(make)

    def close(self) -> None:
        self.call(lambda: (self.a.close(), self.b.close()))
        self.stop()


@pytest.fixture
def pair() -> Iterator[Pair]:
    p = Pair()
    yield p
    p.close()


def payload(i: int, size: int) -> bytes:
    return bytes([i % 251]) * size


def test_frames_with_segments_arrive_whole_and_in_order_while_the_socket_is_full(pair):
    sizes = [10, 2 << 20, 70_000, 3 << 20, 5, 1 << 20]
    frames = [[f"head{i}".encode(), payload(i, sizes[i % len(sizes)]),
               payload(i + 1, sizes[(i + 3) % len(sizes)])] for i in range(60)]
    for frame in frames:  # from this thread, not the loop: queued frames wait their turn
        pair.a.send_frame(frame)
    pair.wait(lambda: len(pair.got) == len(frames))
    for got, want in zip(pair.got, frames):
        assert [bytes(b) for b in got] == want
    shared = [b for f in pair.got for b in f[1:] if isinstance(b.obj, __import__("mmap").mmap)]
    assert len(shared) == sum(1 for f in frames for b in f[1:] if len(b) >= 1 << 20)
    assert not pair.closed


def test_sending_from_the_loop_thread_queues_segments_too(pair):
    # the loop cannot wait: what the socket does not take queues, segments in their place
    frames = [[b"h", payload(i, 500_000 if i % 2 else 2 << 20)] for i in range(20)]
    pair.call(lambda: [pair.a.send_frame(f) for f in frames])
    pair.wait(lambda: len(pair.got) == len(frames))
    assert [bytes(f[1]) for f in pair.got] == [f[1] for f in frames]


def test_segments_come_back_to_the_pool_once_the_receiver_drops_them(pair):
    for i in range(20):
        pair.a.send_frame([b"h", payload(i, 4 << 20)])
        pair.wait(lambda: len(pair.got) == 1)
        assert bytes(pair.got[0][1][:3]) == payload(i, 3)
        pair.got.clear()
        gc.collect()
    # a released segment is reused: twenty 4 MiB frames never needed more than a few
    pair.wait(lambda: pair.pool_a.held_bytes() <= 3 * (4 << 20))
    assert pair.pool_a.held_bytes() <= 3 * (4 << 20)


def test_a_closed_connection_drops_what_it_lent(pair):
    pair.a.send_frame([b"h", payload(1, 2 << 20)])
    pair.wait(lambda: len(pair.got) == 1)
    kept = pair.got[0][1]  # the receiver still maps it
    pair.call(pair.a.close)
    pair.wait(lambda: len(pair.closed) == 2)
    assert pair.pool_a.held_bytes() == 0
    assert bytes(kept[:4]) == payload(1, 4)  # still readable: the memory lives on


def test_no_descriptors_leak(pair):
    def count() -> int:
        return len(os.listdir("/proc/self/fd"))

    pair.a.send_frame([b"h", payload(0, 2 << 20)])
    pair.wait(lambda: len(pair.got) == 1)
    pair.got.clear()
    gc.collect()
    before = count()
    for i in range(30):
        pair.a.send_frame([b"h", payload(i, 2 << 20)])
        pair.wait(lambda: len(pair.got) == 1)
        pair.got.clear()
        gc.collect()
    assert count() <= before + 4


def test_small_threshold_off_sends_through_the_socket():
    p = Pair(shm_min=0)
    try:
        p.a.send_frame([b"h", payload(3, 2 << 20)])
        p.wait(lambda: len(p.got) == 1)
        assert isinstance(p.got[0][1].obj, bytearray)
    finally:
        p.close()


def test_a_peer_naming_a_segment_it_never_sent_is_cut_off(pair, caplog):
    forged = _shm.DESCRIPTOR.pack(0, 0, 0, 4096)
    raw = encode_frame([b"h", forged], [1])
    pair.call(lambda: pair.a.sock.sendmsg(raw))  # no descriptor travels with it
    pair.wait(lambda: len(pair.closed) >= 1)
    assert pair.got == []
    assert "shared-memory" in caplog.text


def test_an_unsealed_segment_is_refused(pair, caplog):
    fd = os.memfd_create("forged", os.MFD_CLOEXEC)
    os.ftruncate(fd, 4096)
    raw = encode_frame([b"h", _shm.DESCRIPTOR.pack(0, 0, 0, 4096)], [1])
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fd.to_bytes(4, "little"))]
    pair.call(lambda: pair.a.sock.sendmsg(raw, anc))
    os.close(fd)
    pair.wait(lambda: len(pair.closed) >= 1)
    assert pair.got == []
    assert "shrink" in caplog.text
