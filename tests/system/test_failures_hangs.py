"""No silent hangs, and what keeps working after a failure (issue 3, items 5 and 6).

Every pending call is bound to its callee's health: when the callee dies the future fails
within 1 s with ``SupervisionError``. A call to a stopped mesh fails at once. An actor that
calls its own endpoint and blocks on the result raises at once; so does a blocking ``.get()``
on the loop of an async actor. A ``.get(timeout=)`` that expires names what is pending.
Slices that exclude failed ranks keep working; spawning on dead procs raises clearly.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from _failure_actors import AsyncVictim, Victim
from _failure_scripts import poll

from regency.actor import ActorError, SupervisionError, this_host
from regency.testing import drop_calls

T = 20
DETECT_S = 1.0  # callee death -> caller's exception




@pytest.fixture
def procs2():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="hangs")
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture
def procs3():
    procs = this_host().spawn_procs(per_host={"gpus": 3}, name="slices")
    yield procs
    procs.stop().get(timeout=T)


# -- a pending call fails within 1 s when its callee dies ------------------------------------
def _pending(mesh: Any, adverb: str) -> Callable[[], Any]:
    """Start a call that rank 1 sleeps in and rank 0 never answers; return a waiter."""
    drop_calls(mesh.sleep, ranks=[0])  # rank 0 stays idle but silent
    if adverb == "call":
        fut = mesh.sleep.call(60)
        return lambda: fut.get(timeout=T)
    if adverb == "call_one":
        fut = mesh.slice(gpus=1).sleep.call_one(60)
        return lambda: fut.get(timeout=T)
    if adverb == "choose":
        fut = mesh.slice(gpus=1).sleep.choose(60)
        return lambda: fut.get(timeout=T)
    if adverb == "stream":
        futs = list(mesh.sleep.stream(60))
        return lambda: [f.get(timeout=T) for f in futs]
    raise AssertionError(adverb)


@pytest.mark.parametrize("adverb", ["call", "call_one", "choose", "stream"])
@pytest.mark.parametrize("cls", [Victim, AsyncVictim], ids=["sync", "async"])
def test_a_pending_call_fails_within_1s_when_the_callee_is_killed(
        procs2, unhandled_failures, cls, adverb) -> None:
    mesh = procs2.spawn(f"pending_{adverb}", cls)
    pids = list(mesh.pid.call().get(timeout=T).values())
    wait = _pending(mesh, adverb)
    killed = time.monotonic()
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(SupervisionError) as info:
        wait()
    took = time.monotonic() - killed
    assert took < DETECT_S, f"the caller waited {took:.2f}s"
    err = info.value
    assert "sleep" in str(err) and "rank 1" in str(err) and "SIGKILL" in str(err), str(err)
    assert err.endpoint == "sleep"
    assert err.mesh_name == mesh._uid and err.ranks == [1] and err.coords == [{"gpus": 1}]
    assert err.pid == pids[1] and err.host and "SIGKILL" in err.cause
    assert err.actor_class.endswith("Victim")


def test_supervision_error_carries_the_failure_fields(procs2, unhandled_failures) -> None:
    """``SupervisionError`` has the fields of ``MeshFailure``, and the root's record agrees."""
    mesh = procs2.spawn("fields", Victim)
    pids = list(mesh.pid.call().get(timeout=T).values())
    mesh.slice(gpus=1).chatter.call_one(3).get(timeout=T)
    fut = mesh.slice(gpus=1).sleep.call_one(60)
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(SupervisionError) as info:
        fut.get(timeout=T)
    err = info.value
    assert isinstance(err, RuntimeError)
    assert (err.mesh_name, err.ranks, err.coords) == (mesh._uid, [1], [{"gpus": 1}])
    assert err.actor_class == "_failure_actors.Victim"
    assert err.endpoint == "sleep"
    assert err.pid == pids[1] and err.host == os.uname().nodename
    assert "SIGKILL" in err.cause
    assert err.last_lines[-3:] == ["chatter line 0", "chatter line 1", "chatter line 2"]
    assert err.failure is not None and err.failure.mesh_name == mesh._uid
    failures = poll(lambda: [f for f in unhandled_failures() if f.mesh_name == mesh._uid])
    f = failures[0]
    assert (f.ranks, f.coords, f.pid, f.endpoint) == ([1], [{"gpus": 1}], pids[1], "sleep")
    assert f.last_lines == err.last_lines


def test_calls_queued_behind_a_fatal_message_fail_instead_of_hanging(
        procs2, unhandled_failures) -> None:
    mesh = procs2.spawn("queued", Victim)
    mesh.ping.call().get(timeout=T)
    mesh.slice(gpus=1).boom.broadcast("fatal", 0.3)  # no reply port: the actor fails
    queued = [mesh.slice(gpus=1).ping.call_one(i) for i in range(3)]  # behind it, in its mailbox
    for fut in queued:
        with pytest.raises(SupervisionError, match="fatal"):
            fut.get(timeout=T)
    start = time.monotonic()
    with pytest.raises(SupervisionError, match="fatal"):  # a new call: refused at once
        mesh.slice(gpus=1).ping.call_one("late").get(timeout=T)
    assert time.monotonic() - start < 0.5
    assert mesh.slice(gpus=0).ping.call_one("alive").get(timeout=T) == "alive"


# -- stopped meshes -----------------------------------------------------------------------------
def test_a_call_to_a_stopped_actor_mesh_fails_at_once(procs2) -> None:
    mesh = procs2.spawn("stopped", Victim)
    mesh.ping.call().get(timeout=T)
    mesh.stop().get(timeout=T)
    start = time.monotonic()
    with pytest.raises(SupervisionError, match="stopped"):
        mesh.ping.call("late").get(timeout=T)
    with pytest.raises(SupervisionError):
        mesh.slice(gpus=0).ping.call_one("late").get(timeout=T)
    assert time.monotonic() - start < 0.5


def test_a_call_to_a_mesh_on_a_stopped_proc_mesh_fails_at_once() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="stopped_procs")
    mesh = procs.spawn("on_stopped", Victim)
    mesh.ping.call().get(timeout=T)
    procs.stop().get(timeout=T)
    start = time.monotonic()
    with pytest.raises(SupervisionError):
        mesh.ping.call("late").get(timeout=T)
    assert time.monotonic() - start < 0.5
    with pytest.raises(RuntimeError, match="stopped"):
        procs.spawn("after_stop", Victim)


# -- deadlocks that raise instead ---------------------------------------------------------------
def test_an_actor_blocking_on_its_own_endpoint_raises_at_once(procs2) -> None:
    mesh = procs2.spawn("selfcall", Victim)
    start = time.monotonic()
    with pytest.raises(ActorError) as info:
        mesh.slice(gpus=0).call_mesh.call_one(mesh).get(timeout=T)
    assert time.monotonic() - start < 1.0
    assert isinstance(info.value.exception, RuntimeError)
    text = str(info.value.exception)
    assert "own endpoint" in text and "deadlock" in text and "ping" in text, text
    # calling the *other* rank of the same mesh is fine; and the actor lives on
    assert mesh.slice(gpus=0).call_mesh.call_one(mesh.slice(gpus=1)).get(timeout=T) == ["me"]


def test_an_async_actor_awaiting_its_own_endpoint_raises_at_once(procs2) -> None:
    mesh = procs2.spawn("selfawait", AsyncVictim)
    start = time.monotonic()
    with pytest.raises(ActorError) as info:
        mesh.slice(gpus=1).await_myself.call_one(mesh.slice(gpus=1)).get(timeout=T)
    assert time.monotonic() - start < 1.0
    assert "own endpoint" in str(info.value.exception), info.value


def test_a_blocking_get_on_the_loop_of_an_async_actor_raises_at_once(procs2) -> None:
    mesh = procs2.spawn("loopget", AsyncVictim)
    other = procs2.spawn("loopget_other", Victim)
    start = time.monotonic()
    with pytest.raises(ActorError) as info:
        mesh.slice(gpus=0).blocking_get_on_loop.call_one(other.slice(gpus=1)).get(timeout=T)
    assert time.monotonic() - start < 1.0
    text = str(info.value.exception)
    assert isinstance(info.value.exception, RuntimeError)
    assert "async actor" in text and "await" in text, text
    assert mesh.slice(gpus=0).ping.call_one("alive").get(timeout=T) == "alive"


def test_an_expired_get_timeout_names_the_mesh_rank_and_endpoint(procs2) -> None:
    mesh = procs2.spawn("timeouts", Victim)
    mesh.ping.call().get(timeout=T)
    drop_calls(mesh.ping, ranks=[1])
    fut = mesh.ping.call("lost on rank 1")
    with pytest.raises(TimeoutError) as info:
        fut.get(timeout=0.3)
    text = str(info.value)
    assert mesh._uid in text and "ping" in text and "[1]" in text, text
    assert "0.3" in text
    assert not fut.done()  # a timed-out get does not consume the future
    one = mesh.slice(gpus=0).ping.call_one("fine")
    assert one.get(timeout=T) == "fine"


# -- what keeps working -------------------------------------------------------------------------
def test_slices_that_exclude_a_dead_rank_keep_working(procs3, unhandled_failures) -> None:
    mesh = procs3.spawn("survivors", Victim)
    pids = list(mesh.pid.call().get(timeout=T).values())
    os.kill(pids[1], signal.SIGKILL)
    poll(lambda: unhandled_failures())
    start = time.monotonic()
    with pytest.raises(SupervisionError, match="rank 1"):
        mesh.ping.call("all").get(timeout=T)
    with pytest.raises(SupervisionError, match="rank 1"):
        mesh.slice(gpus=slice(0, 2)).ping.call("first two").get(timeout=T)
    assert time.monotonic() - start < 0.5  # refused at once, not after a timeout
    assert mesh.slice(gpus=0).ping.call_one("r0").get(timeout=T) == "r0"
    assert mesh.slice(gpus=2).ping.call_one("r2").get(timeout=T) == "r2"
    assert list(mesh.slice(gpus=slice(2, 3)).ping.call("tail").get(timeout=T).values()) == [
        "tail"]
    # a new mesh on the healthy procs works too
    fresh = procs3.slice(gpus=2).spawn("fresh", Victim)
    assert fresh.ping.call_one("new").get(timeout=T) == "new"


def test_slices_that_exclude_a_failed_actor_keep_working(procs3, unhandled_failures) -> None:
    mesh = procs3.spawn("survivors_exc", Victim)
    mesh.ping.call().get(timeout=T)
    mesh.slice(gpus=2).boom.broadcast("rank 2 fails")
    poll(lambda: unhandled_failures())
    with pytest.raises(SupervisionError, match="rank 2 fails"):
        mesh.ping.call().get(timeout=T)
    assert list(mesh.slice(gpus=slice(0, 2)).ping.call("ok").get(timeout=T).values()) == [
        "ok", "ok"]
    # the proc of the failed actor is alive: a new actor mesh there works
    again = procs3.spawn("again", Victim)
    assert list(again.ping.call(1).get(timeout=T).values()) == [1, 1, 1]


def test_spawning_on_a_proc_mesh_with_a_dead_proc_raises_a_clear_error(
        procs3, unhandled_failures) -> None:
    mesh = procs3.spawn("before", Victim)
    pids = list(mesh.pid.call().get(timeout=T).values())
    os.kill(pids[1], signal.SIGKILL)
    poll(lambda: unhandled_failures())
    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        procs3.spawn("after", Victim)
    assert time.monotonic() - start < 0.5
    text = str(info.value)
    assert "rank" in text and "1" in text and "dead" in text and "slice" in text, text
    ok = procs3.slice(gpus=slice(2, 3)).spawn("healthy_slice", Victim)
    assert ok.ping.call_one("ok").get(timeout=T) == "ok"


def test_spawning_right_after_a_proc_died_never_hangs(procs2, unhandled_failures) -> None:
    """Spawn before the death is known: either the spawn or the first call fails, fast."""
    mesh = procs2.spawn("racer", Victim)
    pids = list(mesh.pid.call().get(timeout=T).values())
    os.kill(pids[0], signal.SIGKILL)
    start = time.monotonic()
    try:
        late = procs2.spawn("late", Victim)
        with pytest.raises(SupervisionError):
            late.ping.call("x").get(timeout=T)
    except SupervisionError:
        pass
    assert time.monotonic() - start < 2.0
