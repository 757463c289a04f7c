"""The deadline timer (``_api/_deadlines.py``): calls fail at their deadlines, earliest
first, answered ones are left alone, and the heap does not keep answered calls for long.

Fake collectors stand for calls: each records the error it was failed with and sets an
event, which the tests wait on (the timer is a real thread)."""

from __future__ import annotations

import math
import threading
import time
from fractions import Fraction

import pytest

from regency._api import _deadlines
from regency._api._context import _current
from regency._api._deadlines import deadline, expiry, scope
from regency.errors import DeadlineExceeded

T = 30.0
pytestmark = pytest.mark.timeout(60)


class FakeCall:
    """What the timer and ``cancel_call`` use of a collector; no members to tell."""

    cancellable = True

    def __init__(self, label: str, order: list[str] | None = None) -> None:
        self.label = label
        self.expected = {0, 2}
        self.route = type("R", (), {"ranks": [], "addrs": []})()
        self.rt = type("Rt", (), {"dead_addrs": set()})()
        self.contact, self.port_id, self.uid = "c", 1, "u"
        self.open = True
        self.error: BaseException | None = None
        self.failed = threading.Event()
        self.order = order

    def pending(self) -> bool:
        return self.open

    def cancel(self, error: BaseException) -> bool:
        if not self.open:
            return False
        self.open = False
        self.error = error
        if self.order is not None:
            self.order.append(self.label)
        self.failed.set()
        return True


def test_a_call_fails_at_its_deadline_with_a_readable_error() -> None:
    call = FakeCall("m.step()")
    _deadlines.watch(call, time.monotonic() + 0.01, 0.01)
    assert call.failed.wait(T)
    assert isinstance(call.error, DeadlineExceeded) and isinstance(call.error, TimeoutError)
    assert str(call.error) == ("m.step() was not answered within its deadline (0.01 s); "
                               "ranks [0, 2] were told to stop it")


def test_calls_fail_earliest_first_and_answered_ones_are_left_alone() -> None:
    order: list[str] = []
    now = time.monotonic()
    late, early, answered = (FakeCall(n, order) for n in ("late", "early", "answered"))
    answered.open = False  # answered before its deadline
    _deadlines.watch(late, now + 0.2, 0.2)
    _deadlines.watch(answered, now + 0.05, 0.05)
    _deadlines.watch(early, now + 0.1, 0.1)  # earlier than what the thread waits for
    assert late.failed.wait(T) and early.failed.wait(T)
    assert order == ["early", "late"]
    assert answered.error is None


def test_an_answered_call_leaves_nothing_of_itself_in_the_heap_and_it_shrinks() -> None:
    timer = _deadlines._Timer()
    timer.started = True  # no thread: only the heap is looked at
    far = time.monotonic() + 3600
    for n in range(5000):
        entry = timer.add(far, 3600, FakeCall(str(n)))
        if n % 100:  # most are answered: the call clears its entry when it closes
            entry[3] = None
    assert len(timer.heap) <= 2 * 1024 + 50


@pytest.mark.parametrize(("seconds", "text"), [(0.0499, "0.05"), (4.9999, "5"), (0.2, "0.2"),
                                               (1234.5, "1234.5"), (0.001, "0.01"),
                                               (0.0, "0"), (0.995, "1"), (0.31, "0.31")])
def test_durations_read_as_a_person_wrote_them(seconds: float, text: str) -> None:
    assert _deadlines.seconds_text(seconds) == text


def test_a_long_list_of_ranks_is_cut() -> None:
    assert _deadlines._ranks_text({3}) == "rank 3 was"
    assert _deadlines._ranks_text({2, 0}) == "ranks [0, 2] were"
    assert _deadlines._ranks_text(set(range(300))) == (
        "ranks [0, 1, 2, 3, 4, 5, 6, 7, ...] (300 in all) were")


def test_any_real_number_is_a_deadline_and_a_huge_one_is_refused() -> None:
    with deadline(Fraction(1, 2)):
        assert 0 < expiry() - time.monotonic() <= 0.5
    with pytest.raises(ValueError, match="finite"), deadline(10**400):
        pass


def test_outside_any_block_and_any_call_there_is_no_deadline() -> None:
    assert expiry() == 0.0


def test_deadline_none_lifts_the_inherited_deadline() -> None:
    ctx = type("Ctx", (), {"expires": time.monotonic() + 5})()
    token = _current.set(ctx)  # type: ignore[arg-type]
    try:
        assert expiry() == ctx.expires
        with deadline(None):
            assert scope.get() == math.inf and expiry() == 0.0
            with deadline(10):  # a new deadline inside: counted from here
                assert 9 < expiry() - time.monotonic() <= 10
        with deadline(10):  # nested in the inherited one: the earlier holds
            assert expiry() == ctx.expires
    finally:
        _current.reset(token)


def test_a_block_restores_the_outer_deadline_when_it_ends() -> None:
    with deadline(100):
        outer = expiry()
        with deadline(1):
            assert expiry() < outer
        assert expiry() == outer
    assert expiry() == 0.0


def test_a_forked_child_makes_its_own_timer() -> None:
    _deadlines._timer()
    _deadlines._forget_in_child()  # what the at-fork hook does in a child
    assert _deadlines._the_timer is None
    assert isinstance(_deadlines._timer(), _deadlines._Timer)


