"""Supervision is the one judge of a new call or spawn (ADR 0015): the adverb and ``spawn``
ask the verdicts the supervisor published and raise its answer at once, in the caller, before
anything is sent. These tests call without ``.get()`` where the refusal must come at once."""

from __future__ import annotations

import pytest

from _actors import Counter
from regency._api._process import runtime
from regency.actor import SupervisionError, this_host
from regency.testing import kill_rank

T = 30


def test_nothing_is_published_while_nothing_is_refused() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="judge_quiet")
    try:
        mesh = procs.spawn("quiet", Counter, 0)
        assert mesh.incr.call_one().get(timeout=T) == 1
        verdicts = runtime().verdicts
        # the hot path checks nothing then; other tests of this process may have left some
        assert verdicts is None or verdicts.call_refusal(
            mesh._uid, zip(mesh._route.ranks, mesh._route.addrs)) is None
    finally:
        procs.stop().get(timeout=T)


def test_a_call_right_after_stop_on_the_same_thread_is_refused_at_once() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="judge_stop")
    try:
        mesh = procs.spawn("stopped", Counter, 0)
        assert list(mesh.incr.call().get(timeout=T).values()) == [1, 1]
        pending = mesh.incr.call()  # sent before the stop: may still be answered
        half = procs.spawn("half", Counter, 0)
        half.slice(gpus=1).stop("half of it")
        mesh.stop("done with it")
        with pytest.raises(SupervisionError, match=r"Endpoint call stopped\.incr\(\) failed: ranks "
                                                   r"0, 1 of mesh 'stopped-\w+' cannot answer: "
                                                   r"the mesh was stopped \(done with it\)"):
            mesh.incr.call()
        with pytest.raises(SupervisionError, match=r"rank 1 of mesh 'half-\w+' cannot answer: "
                                                   r"they were stopped \(half of it\)") as info:
            half.incr.call()
        assert info.value.endpoint == "incr"
        assert half.slice(gpus=0).incr.call_one().get(timeout=T) == 1  # the rest works
        try:
            assert sorted(pending.get(timeout=T).values()) == [2, 2]
        except SupervisionError as exc:  # or it lost the race with the stop: never a hang
            assert "stopped" in str(exc)
    finally:
        procs.stop().get(timeout=T)


def test_a_spawn_on_stopped_procs_is_refused_and_the_rest_of_the_mesh_spawns() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="judge_spawn")
    try:
        stopping = procs.slice(gpus=1).stop("one proc less")
        with pytest.raises(RuntimeError, match="it was stopped \\(one proc less\\)") as info:
            procs.spawn("nope", Counter)
        assert not isinstance(info.value, SupervisionError)
        stopping.get(timeout=T)
        with pytest.raises(RuntimeError, match="stopped"):
            procs.slice(gpus=1).spawn("nope", Counter)
        alive = procs.slice(gpus=0).spawn("yes", Counter, 5)
        assert alive.incr.call_one().get(timeout=T) == 6
        procs.slice(gpus=1).stop().get(timeout=T)  # stopped already: a no-op
    finally:
        procs.stop().get(timeout=T)
    with pytest.raises(RuntimeError, match="it was stopped"):
        procs.spawn("after", Counter)


def test_calls_and_spawns_after_a_kill_9_are_refused_at_once(unhandled_failures) -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="judge_kill")
    try:
        mesh = procs.spawn("victims", Counter, 0)
        assert list(mesh.incr.call().get(timeout=T).values()) == [1, 1]
        kill_rank(mesh, 1)
        unhandled_failures.wait_for("SIGKILL")  # the machine heard of the exit
        with pytest.raises(SupervisionError, match=r"Endpoint call victims\.incr\(\) failed: "
                                                   r"rank 1 of mesh 'victims-\w+' .*lost its proc "
                                                   r".*the proc killed by signal SIGKILL"):
            mesh.incr.call()
        with pytest.raises(SupervisionError, match="the procs of rank 1 are dead"):
            procs.spawn("more", Counter)
        assert mesh.slice(gpus=0).incr.call_one().get(timeout=T) == 2
        assert procs.slice(gpus=0).spawn("more", Counter, 7).incr.call_one().get(timeout=T) == 8
    finally:
        procs.stop().get(timeout=T)


def test_a_call_to_a_failed_rank_is_refused_at_once(unhandled_failures) -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="judge_failed")
    try:
        mesh = procs.spawn("failing", Counter, 0)
        mesh.slice(gpus=1).fail.broadcast("fails on purpose")
        unhandled_failures.wait_for("fails on purpose")  # the machine took the failure in
        with pytest.raises(SupervisionError, match=r"rank 1 of mesh 'failing-\w+' failed: The "
                                                   r"actor .*Counter and all its descendants "
                                                   r"have failed: .*fails on purpose"):
            mesh.value.call()
        assert mesh.slice(gpus=0).value.call_one().get(timeout=T) == 0
    finally:
        procs.stop().get(timeout=T)
