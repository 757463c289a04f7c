"""``with deadline(seconds):`` (ADR 0041, ``_api/_deadlines.py``): a call not answered in
time fails with ``DeadlineExceeded`` and its members stop it, as for ``Future.cancel()``; a
call whose deadline passed in the mailbox is dropped; the endpoint sees the time left, and
the calls it sends inherit the deadline.

Nothing here waits for time to pass except where a deadline's passing is what is tested:
actors block at gates (events) that the test opens only after the deadline failed the call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _cancel_actors import Opener, Sleeper
from _deadline_actors import Timed

from regency.actor import Channel, deadline, send, this_host
from regency.errors import DeadlineExceeded

T = 30
LONG = 600.0  # a deadline no test reaches
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def procs() -> Iterator[Any]:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="deadlines")
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(scope="module")
def timed(procs: Any) -> Any:
    return procs.slice(gpus=0).spawn("timed", Timed)


@pytest.fixture(scope="module")
def peer(procs: Any) -> Any:
    return procs.slice(gpus=1).spawn("peer", Timed)


@pytest.fixture(scope="module")
def opener(procs: Any) -> Any:
    """Another actor of ``timed``'s proc: opens its gates, reads its log."""
    return procs.slice(gpus=0).spawn("opener", Opener)


@pytest.fixture(scope="module")
def peer_opener(procs: Any) -> Any:
    return procs.slice(gpus=1).spawn("peer_opener", Opener)


def until_logged(opener: Any, *lines: str) -> list[str]:
    """The proc's log once it has all ``lines`` (polled: the event is in another process)."""
    limit = time.monotonic() + T
    while True:
        log: list[str] = opener.history.call_one().get(timeout=T)
        if all(line in log for line in lines):
            return log
        assert time.monotonic() < limit, f"never logged {lines}: {log}"
        time.sleep(0.01)


def past(seconds: float) -> None:
    """Return once ``seconds`` have passed (a deadline's passing is the event waited for)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(left)


def test_a_call_answered_in_time_sees_the_time_left(timed: Any) -> None:
    assert timed.left.call_one().get(timeout=T) is None  # no deadline
    with deadline(LONG):
        left = timed.left.call_one().get(timeout=T)
    assert 0 < left <= LONG
    # a sync actor reuses its context for the next message: that one has no deadline
    assert timed.left.call_one().get(timeout=T) is None


def test_a_call_not_answered_in_time_fails_and_its_member_is_told(
        timed: Any, opener: Any) -> None:
    with deadline(0.2):
        fut = timed.work.call_one("a1")
    with pytest.raises(DeadlineExceeded, match=r"timed.*work\(\) was not answered within "
                       r"its deadline \(0\.\d+ s\); rank 0 was told to stop it"):
        fut.get(timeout=T)
    assert isinstance(fut.exception(timeout=T), TimeoutError)
    assert not fut.cancelled()  # a deadline, not a cancel()
    assert timed.record.call_one("a1 next").get(timeout=90) == "a1 next"  # after work
    log = until_logged(opener, "a1 next")
    if "a1 started" in log:  # it ran (else its turn came after the deadline: skipped)
        assert log.index("a1 started") < log.index("a1 noticed") < log.index("a1 next")


def test_a_call_whose_deadline_passes_in_the_queue_never_runs(
        timed: Any, opener: Any) -> None:
    running = timed.block.call_one("b1")
    with deadline(0.2):
        queued = timed.record.call_one("b1 queued")  # behind block: the actor is serial
    with pytest.raises(DeadlineExceeded):
        queued.get(timeout=T)
    opener.open.call_one("b1").get(timeout=T)
    assert running.get(timeout=T) == "b1"
    assert timed.record.call_one("b1 after").get(timeout=T) == "b1 after"
    assert "b1 queued" not in until_logged(opener, "b1 after")


def test_the_member_drops_an_expired_call_and_answers_a_port_of_the_users(
        timed: Any, opener: Any) -> None:
    """No timer on the caller's side for a port of the user's: the member's own check at
    the call's turn is what answers it."""
    running = timed.block.call_one("c1")
    port, receiver = Channel.open()
    with deadline(0.2):
        send(timed.record, ("c1 queued",), {}, port=port)
    opener.history.call_one().get(timeout=T)  # the proc has read (and dated) the call
    past(0.2)
    opener.open.call_one("c1").get(timeout=T)
    assert running.get(timeout=T) == "c1"
    with pytest.raises(DeadlineExceeded, match=r"record\(\) was dropped at rank 0: its "
                       r"deadline \(0\.\d+ s\) had passed when its turn came"):
        receiver.recv().get(timeout=T)
    assert "c1 queued" not in until_logged(opener, "c1 ended, cancelled=False")


def test_an_async_endpoint_running_at_its_deadline_is_cancelled(procs: Any) -> None:
    sleeper = procs.slice(gpus=1).spawn("deadline_sleeper", Sleeper)
    watcher = procs.slice(gpus=1).spawn("deadline_watcher", Opener)
    with deadline(0.2):
        fut = sleeper.nap.call_one("d1")
    with pytest.raises(DeadlineExceeded):
        fut.get(timeout=T)
    assert sleeper.record.call_one("d1 next").get(timeout=T) == "d1 next"
    log = until_logged(watcher, "d1 next")
    if "d1 started" in log:  # it ran (else its turn came after the deadline: skipped)
        assert log.index("d1 cancelled") < log.index("d1 next")


def test_a_broadcast_past_its_deadline_is_not_sent_and_the_endpoint_goes_on(
        timed: Any, peer: Any, opener: Any) -> None:
    """Not raised: an endpoint that ran past its call's deadline, which its sends inherit,
    would fail its actor for a message nobody waits on."""
    timed.late_broadcast.broadcast(peer, "h1")
    until_logged(opener, "h1 went on")
    assert timed.record.call_one("h1 next").get(timeout=T) == "h1 next"


def test_hooks_after_a_call_with_a_deadline_have_none(procs: Any, peer_opener: Any) -> None:
    """``__cleanup__`` runs in the context of the actor's last message: that message's
    deadline is not its."""
    actor = procs.slice(gpus=1).spawn("deadline_cleaned", Timed)
    with deadline(LONG):
        assert actor.left.call_one().get(timeout=T) is not None
    actor.stop().get(timeout=T)
    until_logged(peer_opener, "cleanup time_remaining=None")


def test_the_time_left_is_the_blocks_around_the_code_too(timed: Any) -> None:
    from regency.actor import context
    assert context().time_remaining() is None
    with deadline(LONG):
        assert 0 < context().time_remaining() <= LONG
        with deadline(None):
            assert context().time_remaining() is None


def test_calls_an_endpoint_sends_inherit_its_deadline(timed: Any, peer: Any) -> None:
    with deadline(LONG):
        own, theirs = timed.ask.call_one(peer).get(timeout=T)
    assert 0 < theirs <= own <= LONG
    with deadline(LONG):
        assert timed.ask_free.call_one(peer).get(timeout=T) is None  # deadline(None)
    assert timed.ask.call_one(peer).get(timeout=T) == (None, None)


def test_a_chain_of_calls_shares_one_deadline(timed: Any, peer: Any, opener: Any,
                                              peer_opener: Any) -> None:
    with deadline(2.0):  # ask_blocked starts well within it: then its nested call expires
        fut = timed.ask_blocked.call_one(peer, "e1")
    with pytest.raises(DeadlineExceeded):
        fut.get(timeout=T)
    # the call the endpoint sent (a blocking get() it cannot be interrupted in) failed at
    # the same deadline
    until_logged(opener, "e1 nested: DeadlineExceeded")
    peer_opener.open.call_one("e1").get(timeout=T)
    assert peer.record.call_one("e1 next").get(timeout=T) == "e1 next"


def test_a_call_sent_after_its_deadline_is_not_sent(timed: Any, opener: Any,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with deadline(0):
        fut = timed.record.call_one("f1 call")
        timed.record.broadcast("f1 broadcast")  # said on stderr, not raised: nobody waits
    assert "record() was not sent: its deadline had passed" in capsys.readouterr().err
    with pytest.raises(DeadlineExceeded, match=r"record\(\) was not sent"):
        fut.get(timeout=T)
    assert timed.record.call_one("f1 after").get(timeout=T) == "f1 after"
    log = until_logged(opener, "f1 after")
    assert "f1 call" not in log and "f1 broadcast" not in log


def test_a_stream_fails_the_replies_not_in_at_its_deadline(
        procs: Any, opener: Any, peer_opener: Any) -> None:
    mesh = procs.spawn("deadline_blockers", Timed)
    with deadline(0.3):
        stream = mesh.block.stream("g1")
    outcomes = []
    for fut in stream:
        with pytest.raises(DeadlineExceeded):
            fut.get(timeout=T)
        outcomes.append(fut.done())
    assert outcomes == [True, True]
    for each in (opener, peer_opener):  # one per proc: let the blockers go
        each.open.call_one("g1").get(timeout=T)
    assert list(mesh.record.call("g1 next").get(timeout=T).values()) == ["g1 next"] * 2


def _nested(outer: float, inner: float) -> Callable[[], float]:
    def left() -> float:
        from regency._api._deadlines import expiry
        with deadline(outer), deadline(inner):
            return expiry() - time.monotonic()
    return left


def test_blocks_nest_and_the_earliest_deadline_holds() -> None:
    assert _nested(LONG, 1.0)() <= 1.0
    assert 1.0 < _nested(1.0 + LONG, LONG)() <= LONG
    assert _nested(1.0, LONG)() <= 1.0


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf")])
def test_a_bad_deadline_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="seconds must be finite and >= 0"), deadline(bad):
        pass


def test_a_deadline_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(TypeError, match="must be a number or None, not str"), deadline(
            "5"):  # type: ignore[arg-type]
        pass
