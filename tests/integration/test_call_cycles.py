"""A cycle of endpoint calls that wait on each other raises, naming every call in it,
instead of hanging (``_api/_waits.py``, ADR 0035); calls that only take long, and callbacks
into a concurrent endpoint, are left alone."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from _cycle_actors import AsyncHopper, Hopper

from regency import config
from regency.actor import ActorError, this_host

T = 60
pytestmark = pytest.mark.timeout(120)

KINDS = {"sync": Hopper, "async": AsyncHopper}


@pytest.fixture(scope="module")
def procs() -> Iterator[Any]:
    with config.configured(deadlock_probe_after=0.2):  # the procs take it at spawn
        procs = this_host().spawn_procs(per_host={"gpus": 2}, name="cycles")
    yield procs
    procs.stop().get(timeout=T)


def ring(procs: Any, kinds: list[str], tag: str) -> list[Any]:
    """One actor of each kind, each the peer of the one before it (the last: of the first)."""
    actors = [procs.slice(gpus=i % 2).spawn(f"{tag}{i}", KINDS[k]) for i, k in enumerate(kinds)]
    for i, a in enumerate(actors):
        a.set_peer.call(actors[(i + 1) % len(actors)]).get(timeout=T)
    return actors


def deadlock_text(err: ActorError) -> str:
    text = str(err)
    assert "deadlock: these endpoint calls wait on each other" in text, text
    return text


@pytest.mark.parametrize("kinds", [["sync", "sync"], ["async", "async"], ["sync", "async"],
                                   ["async", "sync"]])
def test_a_calls_b_calls_a_raises_naming_the_cycle(procs: Any, kinds: list[str]) -> None:
    a, b = ring(procs, kinds, "ab" + "".join(k[0] for k in kinds))
    with pytest.raises(ActorError) as info:
        a.hop.call_one(2).get(timeout=T)
    text = deadlock_text(info.value)
    assert re.search(r"ab\w*0-\w+\.hop\(\) on rank \d+ waits for ab\w*1-\w+\.hop\(\)", text)
    assert "which cannot start before" in text
    # the cycle unwound: both answer, and a call that does not come back works
    assert a.echo.call_one().get(timeout=T) == "echo"
    assert b.hop.call_one(1).get(timeout=T) == "done"


def test_a_cycle_of_three_names_all_three(procs: Any) -> None:
    a, _, _ = ring(procs, ["sync", "async", "sync"], "abc")
    with pytest.raises(ActorError) as info:
        a.hop.call_one(3).get(timeout=T)
    text = deadlock_text(info.value)
    for name in ("abc0-", "abc1-", "abc2-"):
        assert name in text, text
    assert a.hop.call_one(2).get(timeout=T) == "done"  # a -> b -> c: no cycle


def wait_on_a_mesh_that_calls_back(procs: Any, kind: str, tag: str) -> None:
    """One actor waits on every member of a mesh, each of which waits on it: it raises."""
    a = procs.slice(gpus=0).spawn(f"one_{tag}", KINDS[kind])
    many = procs.spawn(f"many_{tag}", KINDS[kind])
    a.set_peer.call(many).get(timeout=T)
    many.set_peer.call(a).get(timeout=T)
    with pytest.raises(ActorError) as info:
        a.hop_all.call_one(2).get(timeout=T)
    deadlock_text(info.value)
    assert a.echo.call_one().get(timeout=T) == "echo"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_wait_on_a_whole_mesh_that_calls_back_raises(procs: Any, kind: str) -> None:
    wait_on_a_mesh_that_calls_back(procs, kind, kind)


def test_concurrent_bodies_that_wait_on_each_other_are_no_cycle(procs: Any) -> None:
    """a.hop_c waits for b.hop_c, which waits for a.hop_c(0): concurrent bodies, whose
    actors keep taking messages while they wait. The last one naps past several probe
    intervals, so the probes go round and must find no cycle."""
    a, b = ring(procs, ["async", "async"], "conc")
    a.set_peer.call(b, 1.0).get(timeout=T)
    assert a.hop_c.call_one(2, via="hop_c").get(timeout=T) == "done"


def test_a_serial_endpoint_waiting_on_a_callback_to_a_concurrent_one_deadlocks(
    procs: Any,
) -> None:
    """The mailbox of an async actor waits for its serial endpoint: a call back to the same
    actor, concurrent endpoint or not, is queued behind it."""
    a, _ = ring(procs, ["async", "async"], "serial")
    with pytest.raises(ActorError) as info:
        a.hop.call_one(2, via="hop_c").get(timeout=T)
    assert "the endpoint that waits a @concurrent_endpoint" in deadlock_text(info.value)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_call_that_only_takes_long_is_left_alone(procs: Any, kind: str) -> None:
    """Probes go out (the wait outlasts several probe intervals) and find no cycle."""
    a, _ = ring(procs, [kind, "sync"], f"slow_{kind}")
    assert a.hop.call_one(1, via="slow").get(timeout=T) == "slow"


def test_a_wait_of_a_task_the_endpoint_started_is_not_the_endpoints(procs: Any) -> None:
    """a.step starts a task that waits for b.hop, which calls a.hop, queued behind a.step;
    a.step itself only sleeps, so it returns, and then everything does."""
    a, _ = ring(procs, ["async", "sync"], "task")
    assert a.step.call_one(1.0).get(timeout=T) == "stepped"
    assert a.background_result.call_one().get(timeout=T) == "done"


def test_a_cycle_through_a_wait_with_a_timeout_ends_with_the_timeout(procs: Any) -> None:
    """b's wait has a timeout, so the cycle ends by itself: the TimeoutError, not a
    deadlock report."""
    a, _ = ring(procs, ["sync", "sync"], "timed")
    with pytest.raises(ActorError) as info:
        a.hop.call_one(2, via="hop_t").get(timeout=T)
    assert "TimeoutError" in str(info.value) and "deadlock" not in str(info.value)


def test_a_wait_on_three_members_that_all_call_back_raises_once() -> None:
    """Every member's probe passes the one actor they all wait behind and stops at the
    handler it has seen: the probes do not multiply round the cycles."""
    with config.configured(deadlock_probe_after=0.2):
        procs = this_host().spawn_procs(per_host={"gpus": 3}, name="three")
    try:
        wait_on_a_mesh_that_calls_back(procs, "sync", "three")
    finally:
        procs.stop().get(timeout=T)
