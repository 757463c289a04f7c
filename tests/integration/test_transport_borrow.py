"""Borrowed reads: a thread other than the loop's reads a connection itself, over a real
Unix socket pair.

``b`` is read through a :class:`Poller` (as every plain connection of a runtime is); a test
thread borrows it with :meth:`Connection.read_here`. Frames it takes are its own; from the
first it declines on, frames go to the loop in order, as if the loop had read them; after the
borrow the loop reads again; a wake, a timeout, a close or a hang-up each end the wait.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import pytest
from _loop_pair import LoopPair

from regency._transport._connection import Connection
from regency._transport._poller import Poller, Waker

pytestmark = pytest.mark.timeout(60)
T = 10.0


class Pair(LoopPair):
    """``a`` writes; ``b`` is polled. ``got`` collects what the loop delivers from ``b``."""

    def __init__(self, linger: float = 0.0) -> None:
        super().__init__()

        def poller() -> Poller:  # made on the loop thread, as a runtime's is
            self.poller = Poller(self.loop, linger)
            return self.poller

        self.a, self.b = self.connect(poller)

    def keep(self, frame: list[memoryview]) -> bytes:
        return b"".join(bytes(b) for b in frame)

    def send(self, *names: bytes) -> None:
        for name in names:
            self.a.send_frame([name])

    def close(self) -> None:
        self.call(lambda: (self.a.close(), self.b.close(), self.poller.close()))
        self.stop()


@pytest.fixture
def pair() -> Any:
    p = Pair()
    yield p
    p.close()


class Taker:
    """Takes frames whose header starts with ``prefix``."""

    def __init__(self, prefix: bytes = b"T") -> None:
        self.prefix = prefix
        self.taken: list[bytes] = []

    def __call__(self, frame: list[memoryview]) -> bool:
        data = b"".join(bytes(b) for b in frame)
        if not data.startswith(self.prefix):
            return False
        self.taken.append(data)
        return True


def test_taken_frames_stay_and_the_rest_reach_the_loop_in_order(pair: Pair) -> None:
    assert pair.b.pause_reads()
    pair.send(b"T1", b"X1", b"T2", b"X2")
    take = Taker()
    assert pair.b.read_here(take, Waker(), T, lambda: False, paused=True)
    # one read got all four: the first is taken, the rest go back in order, T2 included
    assert take.taken == [b"T1"]
    pair.wait(lambda: len(pair.got) == 3)
    assert pair.got == [b"X1", b"T2", b"X2"]


def test_the_loop_reads_again_after_a_borrow(pair: Pair) -> None:
    take = Taker()
    started = threading.Event()

    def ready() -> bool:  # asked once the loop can no longer read it
        started.set()
        return False

    t = threading.Thread(target=lambda: pair.b.read_here(take, Waker(), T, ready))
    t.start()
    assert started.wait(T)
    pair.send(b"T1")
    t.join(T)
    assert take.taken == [b"T1"]
    pair.send(b"T2", b"X")
    pair.wait(lambda: len(pair.got) == 2)
    assert pair.got == [b"T2", b"X"]


def test_a_wake_ends_the_wait(pair: Pair) -> None:
    waker = Waker()
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(
        pair.b.read_here(Taker(), waker, None, lambda: False)))
    t.start()
    waker.wake()
    t.join(T)
    assert result == [True]
    pair.send(b"X")  # the connection is the loop's again
    pair.wait(lambda: pair.got == [b"X"])


def test_a_timeout_ends_the_wait(pair: Pair) -> None:
    start = time.monotonic()
    assert pair.b.read_here(Taker(), Waker(), 0.05, lambda: False)
    assert 0.04 <= time.monotonic() - start < T


def test_ready_already_means_no_read(pair: Pair) -> None:
    assert pair.b.pause_reads()
    pair.send(b"T1")
    take = Taker()
    assert pair.b.read_here(take, Waker(), T, lambda: True, paused=True)
    assert take.taken == []
    pair.wait(lambda: pair.got == [b"T1"])  # still there, and read by the loop


def test_closing_wakes_a_borrower_and_ends_borrowing(pair: Pair) -> None:
    waker = Waker()
    started = threading.Event()
    result: list[bool] = []

    def ready() -> bool:
        started.set()
        return False

    t = threading.Thread(target=lambda: result.append(
        pair.b.read_here(Taker(), waker, None, ready)))
    t.start()
    assert started.wait(T)
    pair.call(pair.b.close)
    t.join(T)
    assert not t.is_alive() and result == [True]
    assert pair.b.read_here(Taker(), waker, None, lambda: False) is False


def test_a_hang_up_seen_by_a_borrower_reaches_the_loop(pair: Pair) -> None:
    started = threading.Event()
    result: list[bool] = []

    def ready() -> bool:  # asked once the loop can no longer read it: the borrower sees EOF
        started.set()
        return False

    t = threading.Thread(target=lambda: result.append(
        pair.b.read_here(Taker(), Waker(), None, ready)))
    t.start()
    assert started.wait(T)
    pair.call(pair.a.close)
    t.join(T)
    assert result == [True]
    pair.wait(lambda: len(pair.closed) == 1)  # the loop closed b, as without a borrower
    assert pair.b.closed
    assert pair.b.read_here(Taker(), Waker(), None, lambda: False) is False


def test_a_frame_larger_than_one_read_arrives_once(pair: Pair) -> None:
    big = b"T" + bytes(range(256)) * 8192  # 2 MiB: more than one borrowed read takes
    assert pair.b.pause_reads()
    sender = threading.Thread(target=lambda: pair.send(big))
    sender.start()
    take = Taker()
    waker = Waker()
    deadline = time.monotonic() + T
    assert pair.b.read_here(take, waker, T, lambda: False, paused=True)
    while not take.taken and not pair.got and time.monotonic() < deadline:
        pair.b.read_here(take, waker, 0.1, lambda: False)
    sender.join(T)
    pair.wait(lambda: len(take.taken) + len(pair.got) >= 1)
    assert (take.taken + pair.got) == [big]


def test_the_loop_thread_never_borrows(pair: Pair) -> None:
    assert pair.call(lambda: pair.b.read_here(Taker(), Waker(), 0, lambda: False)) is False


def test_a_connection_without_a_poller_is_not_borrowed() -> None:
    loop = asyncio.new_event_loop()
    sa, sb = socket.socketpair()
    conn = Connection(sa, loop, lambda c, f: None, lambda c, e: None, label="plain")
    try:
        assert conn.read_here(Taker(), Waker(), 0, lambda: False) is False
        assert conn.pause_reads() is False
    finally:
        sa.close()
        sb.close()
        loop.close()


def test_a_waker_spins_only_while_its_waits_are_short() -> None:
    r, w = socket.socketpair()
    waker = Waker()
    try:
        assert waker.wait(r.fileno(), 0.02, spin=0.005) is False  # a long wait: 20 ms
        assert waker._quick is False  # so the next wait sleeps at once
        w.send(b"x")
        assert waker.wait(r.fileno(), T, spin=0.005) is True
        assert waker._quick is True  # it did not wait at all: spin again
        r.recv(1)
        sender = threading.Timer(0.001, lambda: w.send(b"y"))
        sender.start()
        assert waker.wait(r.fileno(), T, spin=0.5) is True  # arrives while it spins
        sender.join(T)
        r.recv(1)
        waker.wake()
        assert waker.wait(r.fileno(), T, spin=0.005) is False  # a wake, not the socket
    finally:
        r.close()
        w.close()
        waker.close()


def test_a_waker_that_read_first_in_vain_polls_at_once_for_longer_and_longer() -> None:
    waker = Waker()
    try:
        assert waker.reads_first()
        skips = []
        for _ in range(6):  # read-first attempts in a row that find nothing
            waker.read_first_found(False)
            n = 0
            while not waker.reads_first():  # the True that ends the count is the next try
                n += 1
            skips.append(n)
        assert skips == [1, 3, 7, 15, 31, 31]
        waker.read_first_found(True)  # a read that found data: no back-off any more
        waker.read_first_found(False)
        assert not waker.reads_first()  # one skip, as after a first miss
        assert waker.reads_first()
    finally:
        waker.close()


def test_a_busy_borrow_takes_what_is_there_without_polling(pair: Pair) -> None:
    assert pair.b.pause_reads()
    pair.send(b"T1")
    waker = Waker()
    waker.wake()  # a poll would see the wake first and return without reading
    take = Taker()
    assert pair.b.read_here(take, waker, T, lambda: False, paused=True, spin=0.0)
    assert take.taken == [b"T1"]  # read before any poll: the wake is still pending
    assert waker.wait(pair.b.fileno(), 0, 0.0) is False


def test_a_busy_borrow_gets_data_that_comes_later(pair: Pair) -> None:
    take = Taker()
    started = threading.Event()
    waker = Waker()

    def ready() -> bool:  # asked before the read-first attempt (which may find nothing)
        started.set()
        return False

    t = threading.Thread(target=lambda: pair.b.read_here(take, waker, T, ready, spin=0.0))
    t.start()
    assert started.wait(T)
    pair.send(b"T1")
    t.join(T)
    assert not t.is_alive()
    assert take.taken == [b"T1"]
    waker.close()


# -- lingering: a borrow leaves the connection paused for the next one, for a while ----------

@pytest.fixture
def lingering() -> Any:
    p = Pair(linger=3600.0)  # the sweep never resumes it within a test
    yield p
    p.close()


def _borrow_once(pair: Pair, *names: bytes) -> Taker:
    take = Taker()
    assert pair.b.pause_reads()
    pair.send(*names)
    assert pair.b.read_here(take, Waker(), T, lambda: False, paused=True)
    return take


def test_a_connection_left_lingering_reaches_the_loop_once_the_linger_is_over() -> None:
    pair = Pair(linger=0.002)
    try:
        assert _borrow_once(pair, b"T1").taken == [b"T1"]
        pair.send(b"X")  # nobody borrows again: the sweep gives it back to the loop
        pair.wait(lambda: pair.got == [b"X"])
        pair.wait(lambda: not pair.poller._sweeping)  # nothing lingers: no timer left
    finally:
        pair.close()


def test_the_next_borrow_takes_a_lingering_connection_over(lingering: Pair) -> None:
    pair = lingering
    _borrow_once(pair, b"T1")
    assert pair.b._borrowing.lingering
    take = Taker()
    pair.send(b"T2")
    assert pair.b.read_here(take, Waker(), T, lambda: False)  # no pause of its own needed
    assert take.taken == [b"T2"] and pair.got == []
    pair.b.resume_reads()  # an explicit resume ends the linger at once
    assert not pair.b._borrowing.lingering
    pair.send(b"X")
    pair.wait(lambda: pair.got == [b"X"])


def test_a_connection_borrowed_again_stays_in_the_sweep_until_it_is_left_alone(
        lingering: Pair) -> None:
    pair = lingering
    borrowing = pair.b._borrowing
    _borrow_once(pair, b"T1")
    assert borrowing.listed
    assert pair.b.pause_reads()  # the next borrow, in progress when the sweep passes
    assert not borrowing.lingering
    pair.call(lambda: borrowing.sweep(time.monotonic(), 3600.0))
    assert borrowing.listed  # it lingered lately: listed still, nothing to list again
    # well past the linger: ``since + linger - since`` may round to just below ``linger``
    pair.call(lambda: borrowing.sweep(borrowing.since + 2 * 3600.0, 3600.0))
    assert not borrowing.listed  # left alone a whole linger: out of the sweep
    assert borrowing not in pair.poller._lingering
    pair.b.resume_reads()
    pair.send(b"X")
    pair.wait(lambda: pair.got == [b"X"])


def test_unthrottling_a_lingering_connection_lets_the_loop_read_it(lingering: Pair) -> None:
    pair = lingering
    _borrow_once(pair, b"T1")
    pair.call(pair.b.throttle)
    pair.send(b"X")
    pair.call(pair.b.unthrottle)
    pair.wait(lambda: pair.got == [b"X"])
    assert not pair.b._borrowing.lingering


def test_a_throttled_connection_stays_paused_after_its_linger() -> None:
    pair = Pair(linger=0.002)
    try:
        _borrow_once(pair, b"T1")
        pair.call(pair.b.throttle)  # flow control: the sweep must not resume it
        pair.wait(lambda: not pair.poller._sweeping)
        pair.send(b"X")
        assert pair.got == []
        pair.call(pair.b.unthrottle)
        pair.wait(lambda: pair.got == [b"X"])
    finally:
        pair.close()
