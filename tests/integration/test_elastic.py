"""Elastic meshes: ``ProcMesh.respawn`` replaces a dead rank in place.

A rank is killed with SIGKILL in the middle of a training loop; the call in flight to it
fails with ``SupervisionError``; ``respawn`` starts a new proc at the same coordinates, the
trainer is rebuilt with its constructor arguments and restored from a peer, and the loop
goes on with every rank, the same mesh objects reaching the new incarnation.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _elastic_actors import Trainer

import regency.actor as ra
from regency.actor import SupervisionError, this_host

T = 30


class _Seen(list[Any]):
    """The failures the hook was given; ``reported`` is set at the first."""

    def __init__(self) -> None:
        super().__init__()
        self.reported = threading.Event()

    def append(self, failure: Any) -> None:
        super().append(failure)
        self.reported.set()


@pytest.fixture
def failures() -> Iterator[_Seen]:
    """Failures go to a list instead of stopping the program (the hook is looked up late)."""
    seen = _Seen()
    before = ra.unhandled_fault_hook
    ra.unhandled_fault_hook = seen.append
    yield seen
    ra.unhandled_fault_hook = before


def test_a_killed_rank_is_respawned_and_the_training_loop_goes_on(failures: _Seen) -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 4}, name="elastic")
    trainers = procs.spawn("trainers", Trainer, 7)
    old_pids = list(trainers.pid.call().get(timeout=T).values())
    victim = old_pids[2]
    restored: list[dict[str, int]] = []

    def restore(point: dict[str, int], members: dict[str, Any]) -> None:
        weights = trainers.slice(gpus=0).state.call_one().get(timeout=T)  # a live peer's
        members["trainers"].load.call_one(weights).get(timeout=T)
        restored.append(point)

    steps_done = 0
    respawned: list[int] = []
    while steps_done < 6:
        if steps_done == 3 and not respawned:
            os.kill(victim, signal.SIGKILL)
        try:
            out = trainers.step.call(1).get(timeout=T)
        except SupervisionError as exc:
            # the rank's failure, or (a cast that raced the death) its lost connection
            assert any(w in str(exc) for w in ("gpus", "rank", "connection lost")), exc
            # the death reaches the hook once supervision has judged it; a rank respawned
            # before that (a call that raced the death fails at once) is never reported,
            # its failure forgotten: wait for the judgement first
            assert failures.reported.wait(T), "the death was never reported to the hook"
            respawned = procs.respawn(restore=restore)
            continue
        steps_done += 1
        weights = {v["weights"] for v in out.values()}
        assert len(weights) == 1, f"ranks diverged: {out}"  # restored: in step again
    assert respawned == [2] and restored == [{"gpus": 2}]
    new_pids = list(trainers.pid.call().get(timeout=T).values())
    assert new_pids[2] != victim and new_pids[:2] + new_pids[3:] == [
        p for i, p in enumerate(old_pids) if i != 2]
    final = trainers.step.call(1).get(timeout=T)
    assert all(v["seed"] == 7 for v in final.values())  # rebuilt with its constructor args
    assert [v["rank"] for v in final.values()] == [0, 1, 2, 3]
    assert failures, "the death was reported to the hook"
    procs.stop().get(timeout=T)


def test_a_call_in_flight_to_the_dead_rank_fails_and_later_calls_reach_the_new_one(
        failures: list[Any]) -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="inflight")
    trainers = procs.spawn("trainers", Trainer, 1)
    one = trainers.slice(gpus=1)  # a slice made before the respawn
    pid = one.pid.call_one().get(timeout=T)
    stuck = one.hang.call_one()
    started = threading.Event()
    threading.Thread(target=lambda: (started.set(), os.kill(pid, signal.SIGKILL))).start()
    started.wait(T)
    with pytest.raises(SupervisionError):
        stuck.get(timeout=T)
    with pytest.raises(ValueError, match=r"rank\(s\) \[0\].*alive"):
        procs.respawn([0])
    assert procs.respawn([{"gpus": 1}]) == [1]
    assert one.pid.call_one().get(timeout=T) not in (pid, None)
    assert procs.respawn() == []  # nothing dead now
    # the new incarnation can die and be respawned again
    again = one.pid.call_one().get(timeout=T)
    os.kill(again, signal.SIGKILL)
    with pytest.raises(SupervisionError):
        one.hang.call_one().get(timeout=T)
    assert procs.respawn() == [1]
    assert one.pid.call_one().get(timeout=T) not in (pid, again)
    procs.stop().get(timeout=T)


def test_a_supervise_decision_respawns_the_rank() -> None:
    import time

    from _elastic_actors import Owner

    procs = this_host().spawn_procs(name="owner")
    owner = procs.spawn("owner", Owner)
    before = owner.pids.call_one().get(timeout=T)
    os.kill(before[1], signal.SIGKILL)
    deadline = time.monotonic() + T
    while not owner.log.call_one().get(timeout=T):  # __supervise__ runs between messages
        assert time.monotonic() < deadline, "the owner never respawned the rank"
        time.sleep(0.02)
    assert owner.log.call_one().get(timeout=T) == [1]
    after = owner.pids.call_one().get(timeout=T)
    assert after[0] == before[0] and after[1] != before[1]
    procs.stop().get(timeout=T)


def test_a_call_that_races_a_rank_death_names_the_rank_when_undeliverable(
        failures: list[Any]) -> None:
    """A call whose check passed just before its rank died finds the connection gone when
    it is written: the refusal ("message undeliverable") names the rank, the mesh and the
    endpoint, like every other supervision error. The race is made certain by writing the
    call past the check once the connection is known to be lost."""
    from regency._api._endpoint import _One, post_call
    from regency._api._process import runtime
    from regency._runtime._pickling import dumps_call

    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="racing")
    trainers = procs.spawn("trainers", Trainer, 7)
    victim = trainers.slice(gpus=1)
    pid = victim.pid.call_one().get(timeout=T)
    rt = runtime()
    addr = victim._route.addrs[0]
    os.kill(pid, signal.SIGKILL)
    ready = threading.Event()

    def until_lost() -> None:  # the connection's end and the proc's exit: events of the loop
        # all known first, and the failure delivered: a death reported while the call waits
        # out its grace period (``UNDELIVERABLE_GRACE``), or while its undeliverable answer
        # waits on the loop, would fail it as the rank's death, not as undeliverable
        cause = rt.dead_addrs.get(addr, "")
        exited = bool(cause) and not cause.startswith("connection lost")  # the proc's exit
        if rt.router.is_dead(addr) and exited and failures.reported.is_set():
            ready.set()
        else:
            rt.loop.call_later(0.01, until_lost)

    rt.loop.call_soon_threadsafe(until_lost)
    assert ready.wait(T), "the killed rank was never seen lost (connection and exit)"
    route = victim._route
    collector = _One(rt, route, "trainers.step", victim._uid, "step")
    data, buffers = dumps_call((1,), {}, 1)
    post_call(rt, route, victim._uid, "step", (rt.contact, collector.port_id), [data, *buffers])
    assert collector.completion.wait(T)
    with pytest.raises(SupervisionError) as info:
        collector.completion.outcome()
    text = str(info.value)
    assert "message undeliverable" in text, text
    assert "rank 1 of mesh" in text and victim._uid in text, text
    assert "trainers.step()" in text and addr in text, text
    procs.stop().get(timeout=T)
