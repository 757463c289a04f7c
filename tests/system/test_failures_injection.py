"""The fault-injection helpers of ``regency.testing`` (issue 3, item 8), as a user's own
tests would use them: kill a rank, make an endpoint raise, delay or drop calls."""

from __future__ import annotations

import signal
import time

import pytest
from _failure_actors import Abort, AsyncVictim, Victim
from _failure_scripts import poll

from regency.actor import ActorError, SupervisionError, this_host
from regency.testing import delay_calls, drop_calls, inject_exception, kill_rank

T = 20




@pytest.fixture
def procs2():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="inject")
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(params=[Victim, AsyncVictim], ids=["sync", "async"])
def mesh(request, procs2):
    m = procs2.spawn(f"inject_{request.param.__name__}", request.param)
    m.ping.call().get(timeout=T)
    return m


def test_kill_rank_sigkills_the_proc_of_that_rank(mesh, unhandled_failures) -> None:
    pids = list(mesh.pid.call().get(timeout=T).values())
    pending = mesh.slice(gpus=1).sleep.call_one(60)
    start = time.monotonic()
    kill_rank(mesh, 1)
    with pytest.raises(SupervisionError, match="SIGKILL") as info:
        pending.get(timeout=T)
    assert time.monotonic() - start < 1.0
    assert info.value.pid == pids[1]
    f = poll(unhandled_failures)[0]
    assert f.ranks == [1] and "SIGKILL" in f.cause
    assert mesh.slice(gpus=0).ping.call_one("alive").get(timeout=T) == "alive"


def test_kill_rank_takes_a_signal_and_a_proc_mesh(procs2, unhandled_failures) -> None:
    victims = procs2.spawn("sigterm", Victim)
    victims.ping.call().get(timeout=T)
    kill_rank(procs2, 0, signal.SIGTERM)
    with pytest.raises(SupervisionError, match="SIGTERM"):
        victims.slice(gpus=0).sleep.call_one(60).get(timeout=T)
    assert victims.slice(gpus=1).ping.call_one(1).get(timeout=T) == 1


def test_kill_rank_on_a_slice_uses_the_slices_ranks(procs2, unhandled_failures) -> None:
    victims = procs2.spawn("slice_kill", Victim)
    pids = list(victims.pid.call().get(timeout=T).values())
    kill_rank(victims.slice(gpus=slice(1, 2)), 0)  # rank 0 of the slice is rank 1 of the mesh
    f = poll(unhandled_failures)[0]
    assert f.ranks == [1] and f.pid == pids[1]


def test_inject_exception_makes_the_next_call_raise(mesh) -> None:
    inject_exception(mesh.ping, ValueError("injected"), ranks=[0])
    with pytest.raises(ActorError) as info:
        mesh.ping.call("x").get(timeout=T)
    assert isinstance(info.value.exception, ValueError)
    assert str(info.value.exception) == "injected"
    # only the next call, only rank 0: the actor lives on
    assert list(mesh.ping.call("y").get(timeout=T).values()) == ["y", "y"]
    assert mesh.slice(gpus=1).ping.call_one("z").get(timeout=T) == "z"


def test_inject_exception_times(mesh) -> None:
    inject_exception(mesh.ping, KeyError("twice"), ranks=[1], times=2)
    for _ in range(2):
        with pytest.raises(ActorError, match="twice"):
            mesh.slice(gpus=1).ping.call_one().get(timeout=T)
    assert mesh.slice(gpus=1).ping.call_one("back").get(timeout=T) == "back"


def test_inject_a_base_exception_fails_the_actor(mesh, unhandled_failures) -> None:
    inject_exception(mesh.ping, Abort("injected abort"), ranks=[1])
    with pytest.raises(SupervisionError, match="injected abort"):
        mesh.slice(gpus=1).ping.call_one().get(timeout=T)
    f = poll(unhandled_failures)[0]
    assert f.ranks == [1] and f.endpoint == "ping" and "Abort: injected abort" in f.cause
    assert mesh.slice(gpus=0).ping.call_one(0).get(timeout=T) == 0


def test_delay_calls_delays_only_the_chosen_rank(mesh) -> None:
    delay_calls(mesh.ping, 0.5, ranks=[1])
    start = time.monotonic()
    fast = mesh.slice(gpus=0).ping.call_one("fast").get(timeout=T)
    fast_s = time.monotonic() - start
    slow = mesh.slice(gpus=1).ping.call_one("slow").get(timeout=T)
    slow_s = time.monotonic() - start
    assert (fast, slow) == ("fast", "slow")
    assert fast_s < 0.4 <= 0.5 <= slow_s < 3.0
    start = time.monotonic()
    mesh.slice(gpus=1).ping.call_one("again").get(timeout=T)
    assert time.monotonic() - start < 0.4  # only the next call was delayed


def test_drop_calls_loses_the_next_call(mesh) -> None:
    drop_calls(mesh.ping, ranks=[1])
    fut = mesh.ping.call("dropped on rank 1")
    with pytest.raises(TimeoutError, match=r"\[1\]"):
        fut.get(timeout=0.3)
    assert list(mesh.ping.call("next").get(timeout=T).values()) == ["next", "next"]


def test_bad_arguments_are_refused(mesh) -> None:
    with pytest.raises(ValueError, match="times"):
        drop_calls(mesh.ping, times=0)
    with pytest.raises(ValueError, match="times"):
        inject_exception(mesh.ping, ValueError("x"), times=-1)


def test_a_proc_death_names_the_endpoint_only_of_the_mesh_that_ran_it(
        procs2, unhandled_failures) -> None:
    """Each mesh on the dead proc gets a failure with the time of the death; only the one
    whose actor was running ``os_exit`` names it (another mesh's used to, and time was 0)."""
    bystanders = procs2.spawn("bystander", AsyncVictim)
    dying = procs2.spawn("dying", Victim)
    assert len(bystanders.ping.call().get(timeout=T)) == 2
    before = time.time()
    dying.slice(gpus=1).os_exit.broadcast()

    def both() -> dict[str, object]:
        return {f.mesh_name.split("-")[0]: f for f in unhandled_failures()}

    found = poll(lambda: {"bystander", "dying"} <= set(both()) and both())
    assert found["dying"].endpoint == "os_exit" and found["dying"].time >= before
    assert found["bystander"].endpoint is None and found["bystander"].time >= before
