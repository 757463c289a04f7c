"""The parts a connection is made of, each on its own: the reader (framing), shared-memory
lending both ways, the writer's direct path, and the runtime's seam to borrowed reads.

Real sockets (``socketpair``) and real shared memory; no event loop runs: these parts do
their work on the calling thread.
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from regency._runtime._borrow import ReadHere, runnable
from regency._runtime._runtime import Runtime
from regency._transport import _shm
from regency._transport._connection import Connection
from regency._transport._poller import Poller, Waker
from regency._transport._reader import Reader
from regency._transport._writer import Writer, _skip
from regency._wire import FrameDecoder, ProtocolError, encode_frame


class Owner:
    """The connection state a reader or writer consults (a plain record)."""

    def __init__(self) -> None:
        self.closed = False
        self.throttled = False
        self.last_activity = 0.0
        self.label = "peer"
        self.lost: list[BaseException | None] = []

    def on_loop(self) -> bool:
        return False

    def to_loop(self, fn: Any, *args: Any) -> None:
        fn(*args)

    def _lost(self, exc: BaseException | None) -> None:
        self.lost.append(exc)


@pytest.fixture
def socks() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    for s in (a, b):
        s.setblocking(False)
    yield a, b
    a.close()
    b.close()


def send(sock: socket.socket, *frames: list[bytes]) -> None:
    for frame in frames:
        sock.sendall(b"".join(bytes(p) for p in encode_frame(frame)))


def joined(frame: list[memoryview]) -> list[bytes]:
    return [bytes(b) for b in frame]


# -- reader ---------------------------------------------------------------------------------
def test_the_reader_turns_bytes_into_whole_frames_in_order(socks: Any) -> None:
    a, b = socks
    owner = Owner()
    reader = Reader(b, owner)
    send(a, [b"h1", b"x" * 100], [b"h2"], [b"h3", b"", b"zz"])
    got: list[list[bytes]] = []
    assert reader.read(lambda f: got.append(joined(f))) is None
    assert got == [[b"h1", b"x" * 100], [b"h2"], [b"h3", b"", b"zz"]]
    assert owner.last_activity > 0


def test_the_reader_reports_an_end_of_stream_and_a_protocol_error(socks: Any) -> None:
    a, b = socks
    reader = Reader(b, Owner())
    a.sendall(b"not a frame at all, not even close")
    end = reader.read(lambda f: None)
    assert end is not None and end[0] is True and isinstance(end[1], ProtocolError)
    a2, b2 = socket.socketpair()
    try:
        b2.setblocking(False)
        a2.close()
        assert Reader(b2, Owner()).read(lambda f: None) == (False, None)
    finally:
        b2.close()


def test_the_reader_stops_handing_out_frames_once_its_connection_is_closed(socks: Any) -> None:
    a, b = socks
    owner = Owner()
    reader = Reader(b, owner)
    send(a, [b"h1"], [b"h2"])
    got: list[list[bytes]] = []

    def sink(frame: list[memoryview]) -> None:
        got.append(joined(frame))
        owner.closed = True  # e.g. the frame's handler closed the connection

    assert reader.read(sink) is None
    assert got == [[b"h1"]]


def test_a_leftover_is_decoded_like_bytes_read(socks: Any) -> None:
    _, b = socks
    reader = Reader(b, Owner())
    data = b"".join(bytes(p) for p in encode_frame([b"hello", b"world"]))
    got: list[list[bytes]] = []
    assert reader.feed(data[:7], lambda f: got.append(joined(f))) is None
    assert got == []
    assert reader.feed(data[7:], lambda f: got.append(joined(f))) is None
    assert got == [[b"hello", b"world"]]


def test_control_frames_are_answered_by_the_reader_not_passed_on(socks: Any) -> None:
    a, b = socks
    pool = _shm.SegmentPool(capacity=64 << 20)
    sender = _shm.Lending(pool, 1 << 20, "a", lambda: None)
    _, lent = sender.share([b"h", bytearray(2 << 20)])
    assert lent is not None and lent.token
    lent.close()
    reader = Reader(b, Owner(), lending=sender)  # the peer's release arrives here
    send(a, _shm.release_frame([lent.token]), [b"after"])
    got: list[list[bytes]] = []
    assert reader.read(lambda f: got.append(joined(f))) is None
    assert got == [[b"after"]]
    again = pool.lend([memoryview(bytearray(2 << 20))], sender)
    assert again.token == lent.token  # it was given back, so it is lent again


# -- lending --------------------------------------------------------------------------------
def test_lending_moves_large_buffers_and_the_receiver_maps_them() -> None:
    pool = _shm.SegmentPool(capacity=64 << 20)
    notified: list[bool] = []
    sender = _shm.Lending(pool, 1 << 20, "a", lambda: None)
    receiver = _shm.Lending(None, 0, "b", lambda: notified.append(True))
    big = bytearray(os.urandom(16)) * (1 << 17)  # 2 MiB
    out, lent = sender.share([b"header", bytes(big), b"small"])
    assert lent is not None and lent.attached == [1]
    assert out[0] == b"header" and out[2] == b"small" and len(out[1]) == _shm.DESCRIPTOR.size
    decoder = FrameDecoder(attachments=True)
    decoder.feed(b"".join(bytes(p) for p in encode_frame(out, lent.attached)))
    frame = decoder.next_frame()
    assert frame is not None
    receiver.received([os.dup(lent.fd)])
    got = receiver.resolve(frame)
    assert bytes(got[1]) == bytes(big) and bytes(got[2]) == b"small"
    del got, frame
    gc.collect()
    assert notified and receiver.take_releases() == [lent.token]
    assert receiver.take_releases() == []
    lent.close()
    receiver.close()
    sender.close()


def test_small_buffers_are_not_lent_and_a_bad_control_frame_is_refused() -> None:
    pool = _shm.SegmentPool(capacity=64 << 20)
    lending = _shm.Lending(pool, 1 << 20, "a", lambda: None)
    frame = [b"header", b"x" * 100]
    assert lending.share(frame) == (frame, None)
    assert lending.control([memoryview(b""), memoryview(b"abc")]) is False
    assert lending.control([memoryview(b""), memoryview(b"\0" * 8)]) is True


def test_a_frame_naming_a_segment_that_never_arrived_is_refused() -> None:
    pool = _shm.SegmentPool(capacity=64 << 20)
    out, lent = _shm.Lending(pool, 1 << 20, "a", lambda: None).share([b"h", bytes(2 << 20)])
    assert lent is not None
    decoder = FrameDecoder(attachments=True)
    decoder.feed(b"".join(bytes(p) for p in encode_frame(out, lent.attached)))
    frame = decoder.next_frame()
    assert frame is not None
    with pytest.raises(_shm.ShmError):
        _shm.Lending(None, 0, "b", lambda: None).resolve(frame)
    lent.close()


# -- writer ---------------------------------------------------------------------------------
def test_the_writer_sends_directly_when_nothing_is_queued(socks: Any) -> None:
    a, b = socks
    loop = asyncio.new_event_loop()  # never run: a direct send does not need it
    try:
        owner = Owner()
        writer = Writer(a, loop, owner)
        writer.send([b"one", b"x" * 1000])
        writer.send([b"two"])
        assert writer.queued == 0
        got: list[list[bytes]] = []
        Reader(b, Owner()).read(lambda f: got.append(joined(f)))
        assert got == [[b"one", b"x" * 1000], [b"two"]]
        owner.closed = True
        with pytest.raises(ConnectionResetError):
            writer.send([b"late"])
    finally:
        loop.close()


def test_skip_leaves_the_unsent_parts_as_views_without_copying() -> None:
    big = bytearray(b"abcdef")
    rest = _skip([b"12", memoryview(big), b"xy"], 4)  # what ``encode_frame`` gives
    assert [bytes(v) for v in rest] == [b"cdef", b"xy"]
    assert rest[0].obj is big
    assert _skip([b"12", b"34"], 4) == []


# -- the seam to borrowed reads -------------------------------------------------------------
def test_read_here_knows_which_ports_any_thread_may_answer() -> None:
    here = ReadHere()
    assert not here.any_thread(7)
    here.allow(7)
    assert here.any_thread(7) and not here.any_thread(8)
    here.forget(7)
    assert not here.any_thread(7)


def test_ports_opened_for_any_thread_are_known_to_the_seam_until_closed() -> None:
    rt = Runtime(secret=b"s" * 32, job="j", role="proc")
    try:
        plain = rt.open_port(lambda env, frame: None)
        anywhere = rt.open_port(lambda env, frame: None, any_thread=True)
        assert rt.read_here is rt.router.read_here
        assert rt.read_here.any_thread(anywhere) and not rt.read_here.any_thread(plain)
        rt.close_port(anywhere)
        assert not rt.read_here.any_thread(anywhere)
    finally:
        rt.loop.close()


def test_came_from_offers_only_a_connection_that_can_be_borrowed(socks: Any) -> None:
    a, b = socks
    loop = asyncio.new_event_loop()
    closed: list[Connection] = []
    try:
        poller = Poller(loop)
        polled = Connection(b, loop, lambda c, f: None, lambda c, e: closed.append(c),
                            label="peer", poller=poller)
        polled.start()
        plain = Connection(a, loop, lambda c, f: None, lambda c, e: None, label="other")
        here = ReadHere()
        here.inbound["peer"] = polled
        here.inbound["other"] = plain
        assert here.came_from("peer") is polled
        assert here.came_from("other") is None  # not polled: only the loop reads it
        assert here.came_from("nobody") is None
        polled.close()
        assert closed == [polled] and here.came_from("peer") is None
        here.closed("peer", polled)
        assert "peer" not in here.inbound
        poller.close()
    finally:
        loop.close()


def test_the_spin_stops_while_the_machine_has_no_idle_core() -> None:
    assert runnable() >= 1  # this thread, at least
    idle = ReadHere()
    idle.spin = 1e-4
    idle._allowed = 1 << 20  # more cores than runnable threads: spin
    assert idle.spin_now() == 1e-4
    busy = ReadHere()
    busy.spin = 1e-4
    busy._allowed = 0  # every runnable thread is one too many: sleep at once
    assert busy.spin_now() == 0.0 and busy.busy()
    busy.busy_too = True  # ``borrow_spin_busy``: spin anyway
    assert busy.spin_now() == 1e-4
    off = ReadHere()  # ``borrow_spin = 0``: never spins, nothing sampled
    off._allowed = 0
    assert off.spin_now() == 0.0


@pytest.mark.parametrize("spin", [0.0, 5.0], ids=["sleep at once", "spin first"])
def test_a_waker_sees_data_a_wake_and_its_timeout_spinning_or_not(spin: float) -> None:
    a, b = socket.socketpair()
    waker = Waker()
    try:
        assert waker.wait(b.fileno(), 0.0, spin) is False  # nothing: the timeout ends it
        a.send(b"x")
        assert waker.wait(b.fileno(), None, spin) is True  # ready: returns at once
        assert b.recv(1) == b"x"
        waker.wake()
        assert waker.wait(b.fileno(), None, spin) is False  # a wake: ends it, consumed
        assert waker.wait(b.fileno(), 0.0, spin) is False  # ... once
        waker._quick = False  # a slow last wait: no spin this time, yet the same answers
        a.send(b"y")
        assert waker.wait(b.fileno(), None, spin) is True
        assert waker._quick or not spin  # a quick wait (within 5 s): spin again next time
        assert b.recv(1) == b"y"
        assert waker.wait(b.fileno(), -1.0, spin) is False  # a timeout already past: at once
    finally:
        waker.close()
        a.close()
        b.close()
