"""Unit tests of the supervision state machine: exact action lists for each rule.

No processes, no event loop: events go in, the returned actions are compared whole. Failure
records (``MeshFailure`` compares by identity) are compared field by field through `plain`.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterable
from typing import Any

import pytest

from regency._supervision import (
    Action,
    ActorFailed,
    CallFinished,
    CallStarted,
    ConnectionLost,
    DeliverToOwner,
    FailCalls,
    FailFast,
    FailOwner,
    GraceExpired,
    HookDone,
    InvalidTransition,
    MeshSpawned,
    MeshStopped,
    ProcExited,
    ProcRetired,
    RankState,
    RunRootHook,
    StartGraceTimer,
    StopFinished,
    SuperviseDone,
    SupervisionState,
)
from regency._supervision import _reasons as say
from regency._supervision._state import TRANSITIONS, Loss
from regency.errors import InternalError, MeshFailure

KILL9 = "was killed by signal 9 (SIGKILL)"


def plain(actions: Iterable[Action]) -> list[tuple[Any, ...]]:
    """Actions as comparable tuples; failure records become dicts of their fields."""

    def value(v: Any) -> Any:
        return dataclasses.asdict(v) if isinstance(v, MeshFailure) else v

    return [
        (type(a).__name__, *(value(getattr(a, f.name)) for f in dataclasses.fields(a)))
        for a in actions
    ]


def spawn(uid: str, members: dict[int, str], owner: str | None = None, kind: str = "actor",
          actor_class: str = "app.Worker") -> MeshSpawned:
    return MeshSpawned(uid, owner, kind, uid.split("-")[0], members,  # type: ignore[arg-type]
                       actor_class=actor_class if kind == "actor" else "", cause_id=f"spawn-{uid}")


def call(call_id: int, uid: str, ranks: Iterable[int], endpoint: str = "step") -> CallStarted:
    return CallStarted(call_id, uid, frozenset(ranks), endpoint, cause_id=f"call-{call_id}")


def killed(addr: str, pid: int = 4242, cause: str = KILL9, expected: bool = False,
           cause_id: str = "reap") -> ProcExited:
    return ProcExited(addr, cause, expected, pid, "hostA", ("last words",), time=12.5,
                      cause_id=cause_id)


def proc_failure(uid: str, ranks: list[int], actor_class: str = "app.Worker", pid: int = 4242,
                 cause: str = KILL9) -> MeshFailure:
    return MeshFailure(mesh_name=uid, ranks=ranks, actor_class=actor_class, host="hostA",
                       pid=pid, cause=say.proc_lost_cause(cause),
                       last_lines=["last words"], time=12.5,
                       kind=say.proc_failure_kind(cause))


def actor_failure(uid: str, rank: int, cause: str = "ValueError: boom") -> MeshFailure:
    return MeshFailure(mesh_name=uid, ranks=[rank], coords=[{"x": rank}],
                       actor_class="app.Worker", endpoint="step", host="hostA", pid=7,
                       cause=cause, traceback="Traceback ...\nValueError: boom", time=3.0)


def lost(uid: str, ranks: str, addr: str, cause: str = KILL9) -> str:
    return f"{ranks} of mesh {uid!r} {say.why_proc_lost(addr, cause)}"


@pytest.fixture
def state() -> SupervisionState:
    return SupervisionState()


# -- rule 1 and 2: a proc dies ----------------------------------------------------------------
def test_kill9_of_a_proc_with_two_owned_meshes(state: SupervisionState) -> None:
    assert state.handle(
        spawn("procs-1", {0: "p0", 1: "p1"}, kind="proc"),
        spawn("w-1", {0: "p0", 1: "p1"}),
        spawn("t-1", {0: "p1"}, owner="mgr-1", actor_class="app.Trainer"),
        call(1, "w-1", [0, 1]),
        call(2, "w-1", [0]),
        call(3, "t-1", [0], "fit"),
        call(4, "w-1", [1]),
    ) == []
    actions = state.handle(killed("p1"))
    assert plain(actions) == plain([
        FailCalls((1, 4), "Endpoint call w.step() failed: " + lost("w-1", "rank 1", "p1"),
                  proc_failure("w-1", [1]), cause_id="reap"),
        FailCalls((3,), "Endpoint call t.fit() failed: " + lost("t-1", "rank 0", "p1"),
                  proc_failure("t-1", [0], "app.Trainer"), cause_id="reap"),
        RunRootHook(proc_failure("procs-1", [1], ""), "procs-1#1", cause_id="reap"),
        RunRootHook(proc_failure("w-1", [1]), "w-1#2", cause_id="reap"),
        DeliverToOwner("mgr-1", proc_failure("t-1", [0], "app.Trainer"), "t-1#3",
                       cause_id="reap"),
    ])
    # The calls share the record that is delivered; the call on rank 0 only is untouched.
    assert actions[0].failure is actions[3].failure  # type: ignore[attr-defined]
    assert state.statistics().pending_calls == 1
    assert state.check_call("w-1", [0]) is None
    assert state.check_call("w-1", [0, 1], "step") == (
        "Endpoint call w.step() failed: " + lost("w-1", "rank 1", "p1"))
    assert state.failure_of("w-1", 1) is actions[3].failure  # type: ignore[attr-defined]


def test_proc_hosting_several_ranks_of_one_mesh_gives_one_failure_naming_them(
    state: SupervisionState,
) -> None:
    state.handle(spawn("w-1", {0: "p0", 1: "p0", 2: "p1"}), call(1, "w-1", [0, 1, 2]))
    assert plain(state.handle(killed("p0"))) == plain([
        FailCalls((1,), "Endpoint call w.step() failed: " + lost("w-1", "ranks 0, 1", "p0"),
                  proc_failure("w-1", [0, 1]), cause_id="reap"),
        RunRootHook(proc_failure("w-1", [0, 1]), "w-1#1", cause_id="reap"),
    ])


def test_expected_exit_fails_pending_calls_but_reports_nothing(state: SupervisionState) -> None:
    state.handle(spawn("w-1", {0: "p0"}), call(1, "w-1", [0]))
    actions = state.handle(killed("p0", cause="exited with code 0", expected=True))
    assert plain(actions) == plain([
        FailCalls((1,), "Endpoint call w.step() failed: "
                  + lost("w-1", "rank 0", "p0", "exited with code 0"),
                  proc_failure("w-1", [0], cause="exited with code 0"), cause_id="reap"),
    ])
    assert state.check_call("w-1", [0]) is not None


def test_a_second_exit_status_of_the_same_proc_is_ignored(state: SupervisionState) -> None:
    state.handle(spawn("w-1", {0: "p0"}))
    assert len(state.handle(killed("p0"))) == 1
    assert state.handle(killed("p0", cause_id="again")) == []


# -- rule 1 and 2: an actor fails ---------------------------------------------------------------
def test_actor_exception_fails_its_calls_and_reaches_the_root_hook(
    state: SupervisionState,
) -> None:
    state.handle(spawn("w-1", {0: "p0", 1: "p1", 2: "p2"}),
                 call(1, "w-1", [0, 1, 2]), call(2, "w-1", [0, 2]), call(3, "w-1", [1], "ping"))
    failure = actor_failure("w-1", 1)
    actions = state.handle(ActorFailed("w-1", 1, failure, cause_id="boom"))
    why = ("rank 1 of mesh 'w-1' failed: The actor app.Worker and all its descendants have "
           "failed: ValueError: boom")
    assert actions == [
        FailCalls((1,), f"Endpoint call w.step() failed: {why}", failure, cause_id="boom"),
        FailCalls((3,), f"Endpoint call w.ping() failed: {why}", failure, cause_id="boom"),
        RunRootHook(failure, "w-1#1", cause_id="boom"),
    ]


def test_slices_that_exclude_failed_ranks_keep_working(state: SupervisionState) -> None:
    state.handle(spawn("w-1", {0: "p0", 1: "p1", 2: "p2"}), call(1, "w-1", [0, 2]))
    state.handle(ActorFailed("w-1", 1, actor_failure("w-1", 1), cause_id="boom"))
    state.handle(killed("p1"))  # its proc goes too: still nothing for the slice
    assert state.check_call("w-1", [0, 2]) is None
    assert state.handle(call(2, "w-1", [2]), CallFinished(1, cause_id="done")) == []
    assert state.statistics().pending_calls == 1
    refusal = state.check_call("w-1", [0, 1]) or ""
    assert "rank 1 of mesh 'w-1' failed: The actor app.Worker and all its descendants" in refusal


def test_a_new_call_to_a_failed_rank_fails_at_once(state: SupervisionState) -> None:
    failure = actor_failure("w-1", 1)
    state.handle(spawn("w-1", {0: "p0", 1: "p1"}), ActorFailed("w-1", 1, failure, cause_id="b"))
    assert state.handle(call(5, "w-1", [0, 1], "ping")) == [
        FailCalls((5,), "Endpoint call w.ping() failed: rank 1 of mesh 'w-1' failed: The actor "
                  "app.Worker and all its descendants have failed: ValueError: boom", failure,
                  cause_id="call-5"),
    ]
    assert state.statistics().pending_calls == 0


def test_failure_in_a_mesh_owned_by_an_actor_goes_to_the_owner(state: SupervisionState) -> None:
    failure = actor_failure("w-1", 0)
    state.handle(spawn("w-1", {0: "p0"}, owner="mgr-1"))
    assert state.handle(ActorFailed("w-1", 0, failure, cause_id="boom")) == [
        DeliverToOwner("mgr-1", failure, "w-1#1", cause_id="boom"),
    ]


def test_duplicate_failures_of_a_rank_are_delivered_once(state: SupervisionState) -> None:
    state.handle(spawn("w-1", {0: "p0", 1: "p1"}, owner="mgr-1"))
    first = state.handle(ActorFailed("w-1", 1, actor_failure("w-1", 1), cause_id="a"))
    assert [type(a) for a in first] == [DeliverToOwner]
    assert state.handle(ActorFailed("w-1", 1, actor_failure("w-1", 1), cause_id="b")) == []
    assert state.handle(killed("p1")) == []  # its proc dies after: the rank was reported
    assert state.statistics().failed_ranks == 1


# -- rule 5: what the owner and the root hook decide --------------------------------------------
def _delivered(state: SupervisionState, owner: str | None = "mgr-1") -> MeshFailure:
    failure = actor_failure("w-1", 0)
    state.handle(spawn("mgr-1", {0: "p9"}, actor_class="app.Manager"),
                 spawn("w-1", {0: "p0"}, owner=owner),
                 ActorFailed("w-1", 0, failure, cause_id="boom"))
    return failure


def test_handled_failure_ends_there(state: SupervisionState) -> None:
    _delivered(state)
    assert state.handle(SuperviseDone("mgr-1", "w-1#1", True, cause_id="sv")) == []
    assert state.statistics().pending_deliveries == 0


def test_unhandled_failure_fails_the_owner_with_the_chain(state: SupervisionState) -> None:
    failure = _delivered(state)
    actions = state.handle(SuperviseDone("mgr-1", "w-1#1", False, time=9.0, cause_id="sv"))
    assert plain(actions) == plain([
        FailOwner("mgr-1", MeshFailure(
            mesh_name="mgr-1", actor_class="app.Manager",
            cause="it did not handle the failure of mesh w-1 that it owns",
            chain=[failure.report()], time=9.0, kind="unhandled"), cause_id="sv"),
    ])
    report = actions[0].failure.report()  # type: ignore[attr-defined]
    assert "This error occurred while handling another failure:" in report
    assert "ValueError: boom" in report


def test_supervise_raising_fails_the_owner_and_says_so(state: SupervisionState) -> None:
    failure = _delivered(state)
    actions = state.handle(SuperviseDone("mgr-1", "w-1#1", True, error="KeyError: 'x'",
                                         traceback="Traceback ...", cause_id="sv"))
    assert plain(actions) == plain([
        FailOwner("mgr-1", MeshFailure(
            mesh_name="mgr-1", actor_class="app.Manager",
            cause="__supervise__ raised KeyError: 'x'", traceback="Traceback ...",
            chain=[failure.report()], time=0.0, kind="unhandled"), cause_id="sv"),
    ])


def test_chains_grow_nearest_first_without_repeating(state: SupervisionState) -> None:
    inner = actor_failure("w-1", 0)
    middle = MeshFailure(mesh_name="mgr-1", cause="it did not handle ...",
                         chain=[inner.report()])
    state.handle(spawn("mgr-1", {0: "p9"}, owner="top-1"),
                 ActorFailed("mgr-1", 0, middle, cause_id="up"))
    [action] = state.handle(SuperviseDone("top-1", "mgr-1#1", False, cause_id="sv"))
    assert isinstance(action, FailOwner)
    assert action.failure.chain == [dataclasses.replace(middle, chain=[]).report(),
                                    inner.report()]
    assert action.failure.report().count("mesh 'w-1' failed") == 1


def test_root_hook_raising_fails_fast(state: SupervisionState) -> None:
    failure = _delivered(state, owner=None)
    assert state.handle(HookDone("w-1#1", True, cause_id="hook")) == [
        FailFast(failure.report(), 1, cause_id="hook"),
    ]


def test_root_hook_returning_carries_on(state: SupervisionState) -> None:
    _delivered(state, owner=None)
    assert state.handle(HookDone("w-1#1", False, cause_id="hook")) == []
    assert state.statistics().pending_deliveries == 0


# -- rule 2: lost connections and the grace timer -----------------------------------------------
def test_exit_status_within_grace_fails_calls_with_the_exit_cause(
    state: SupervisionState,
) -> None:
    state.handle(spawn("w-1", {0: "p0", 1: "p1"}), call(1, "w-1", [0, 1]))
    assert state.handle(ConnectionLost("p1", "EOF", cause_id="eof")) == [
        StartGraceTimer("p1", 0.25, cause_id="eof"),
    ]
    assert state.handle(ConnectionLost("p1", "reset", cause_id="eof2")) == []  # one timer
    assert state.statistics().pending_calls == 1  # a hint only: nothing fails yet
    assert plain(state.handle(killed("p1"))) == plain([
        FailCalls((1,), "Endpoint call w.step() failed: " + lost("w-1", "rank 1", "p1"),
                  proc_failure("w-1", [1]), cause_id="reap"),
        RunRootHook(proc_failure("w-1", [1]), "w-1#1", cause_id="reap"),
    ])
    assert state.handle(GraceExpired("p1", cause_id="timer")) == []
    assert state.statistics().grace_timers == 0


def test_no_exit_status_fails_calls_when_the_grace_expires() -> None:
    state = SupervisionState(grace_s=0.5)
    state.handle(spawn("w-1", {0: "p0", 1: "p1"}), call(1, "w-1", [0, 1]), call(2, "w-1", [0]))
    assert state.handle(ConnectionLost("p1", "EOF", cause_id="eof")) == [
        StartGraceTimer("p1", 0.5, cause_id="eof"),
    ]
    why = ("rank 1 of mesh 'w-1' is unreachable: the connection to its proc p1 was lost (EOF) "
           "and no exit status came within 0.5 s")
    assert state.handle(GraceExpired("p1", cause_id="timer")) == [
        FailCalls((1,), f"Endpoint call w.step() failed: {why}", None, cause_id="timer"),
    ]
    assert state.check_call("w-1", [1]) == why
    assert state.check_call("w-1", [0]) is None
    assert state.handle(ConnectionLost("p1", "again", cause_id="eof2")) == []
    # The exit status arriving late is still the fact: the owner hears of it, once.
    assert plain(state.handle(killed("p1"))) == plain([
        RunRootHook(proc_failure("w-1", [1]), "w-1#1", cause_id="reap"),
    ])
    assert state.check_call("w-1", [1]) == lost("w-1", "rank 1", "p1")


def test_connection_lost_after_the_exit_status_does_nothing(state: SupervisionState) -> None:
    state.handle(spawn("w-1", {0: "p0"}), killed("p0"))
    assert state.handle(ConnectionLost("p0", "EOF", cause_id="eof")) == []


# -- rule 3: stopped meshes ---------------------------------------------------------------------
def test_stopped_mesh_reports_nothing_and_its_calls_fail_when_procs_go(
    state: SupervisionState,
) -> None:
    state.handle(spawn("w-1", {0: "p0", 1: "p1"}), call(1, "w-1", [0, 1]))
    assert state.handle(MeshStopped("w-1", "stop() called", cause_id="stop")) == []
    assert state.handle(MeshStopped("w-1", "again", cause_id="stop2")) == []
    why = "cannot answer: the mesh was stopped (stop() called)"
    assert state.check_call("w-1", [0]) == f"rank 0 of mesh 'w-1' {why}"
    assert state.handle(call(2, "w-1", [1], "ping")) == [
        FailCalls((2,), f"Endpoint call w.ping() failed: rank 1 of mesh 'w-1' {why}", None,
                  cause_id="call-2"),
    ]
    assert state.handle(ActorFailed("w-1", 1, actor_failure("w-1", 1), cause_id="b")) == [
        FailCalls((1,), f"Endpoint call w.step() failed: rank 1 of mesh 'w-1' {why}", None,
                  cause_id="b"),
    ]
    assert state.handle(killed("p0", expected=True), killed("p1")) == []


def test_stopped_mesh_calls_fail_with_mesh_was_stopped_on_proc_exit(
    state: SupervisionState,
) -> None:
    state.handle(spawn("w-1", {0: "p0"}), call(1, "w-1", [0]),
                 MeshStopped("w-1", "stop() called", cause_id="stop"))
    assert state.handle(killed("p0", cause="exited with code 0", expected=True)) == [
        FailCalls((1,), "Endpoint call w.step() failed: rank 0 of mesh 'w-1' cannot answer: "
                  "the mesh was stopped (stop() called)", None, cause_id="reap"),
    ]


def test_stop_finished_fails_calls_left_pending(state: SupervisionState) -> None:
    state.handle(spawn("w-1", {0: "p0", 1: "p1"}), call(1, "w-1", [0, 1]), call(2, "w-1", [0]),
                 MeshStopped("w-1", "bye", cause_id="stop"))
    assert state.handle(StopFinished("w-1", cause_id="stopped")) == [
        FailCalls((1,), "Endpoint call w.step() failed: ranks 0, 1 of mesh 'w-1' cannot "
                  "answer: the mesh was stopped (bye)", None, cause_id="stopped"),
        FailCalls((2,), "Endpoint call w.step() failed: rank 0 of mesh 'w-1' cannot "
                  "answer: the mesh was stopped (bye)", None, cause_id="stopped"),
    ]
    assert state.handle(killed("p0")) == []


def test_stopping_a_proc_mesh_stops_the_actor_meshes_on_its_procs(
    state: SupervisionState,
) -> None:
    state.handle(spawn("procs-1", {0: "p0", 1: "p1"}, kind="proc"),
                 spawn("w-1", {0: "p0", 1: "p1"}, owner="mgr-1"),
                 spawn("v-1", {0: "p7"}, owner="mgr-1"),
                 call(1, "w-1", [0]),
                 MeshStopped("procs-1", "shutdown", cause_id="stop"))
    assert state.check_call("w-1", [1]) == ("rank 1 of mesh 'w-1' cannot answer: the proc mesh "
                                            "of its proc p1 was stopped (shutdown)")
    assert state.check_call("v-1", [0]) is None
    assert state.handle(killed("p0")) == [
        FailCalls((1,), "Endpoint call w.step() failed: rank 0 of mesh 'w-1' cannot answer: "
                  "the proc mesh of its proc p0 was stopped (shutdown)", None, cause_id="reap"),
    ]


# -- rule 4: queries ----------------------------------------------------------------------------
def test_check_spawn_refuses_dead_procs_and_accepts_a_healthy_slice(
    state: SupervisionState,
) -> None:
    state.handle(spawn("procs-1", {0: "p0", 1: "p1", 2: "p2"}, kind="proc"))
    assert state.check_spawn("procs-1") is None
    state.handle(killed("p1"))
    before = state.statistics()
    message = state.check_spawn("procs-1")
    assert message is not None
    assert "Cannot spawn new actors on proc mesh 'procs' (procs-1)" in message
    assert "lost its proc p1: the proc was killed by signal 9" in message
    assert "Spawn on a slice of the mesh that excludes rank 1" in message
    assert state.check_spawn("procs-1", [0, 2]) is None
    assert state.check_spawn("elsewhere-1") is None
    assert state.statistics() == before  # queries change nothing
    state.handle(MeshStopped("procs-1", "done", cause_id="stop"))
    assert "was stopped (done)" in (state.check_spawn("procs-1", [0]) or "")


def test_check_call_on_a_mesh_spawned_elsewhere_is_none(state: SupervisionState) -> None:
    assert state.check_call("unknown-1", [0, 1]) is None


def test_call_to_a_mesh_spawned_elsewhere_fails_when_its_proc_exits(
    state: SupervisionState,
) -> None:
    started = CallStarted(1, "far-1", frozenset({0, 1}), "get", addrs={0: "q0", 1: "q1"},
                          cause_id="c1")
    assert state.handle(started) == []
    assert plain(state.handle(killed("q1"))) == plain([
        FailCalls((1,), "Endpoint call far-1.get() failed: " + lost("far-1", "rank 1", "q1"),
                  proc_failure("far-1", [1], ""), cause_id="reap"),
    ])
    again = CallStarted(2, "far-1", frozenset({1}), "get", addrs={1: "q1"}, cause_id="c2")
    assert state.handle(again) == [
        FailCalls((2,), "Endpoint call far-1.get() failed: " + lost("far-1", "rank 1", "q1"),
                  None, cause_id="c2"),
    ]


def test_a_proc_that_says_it_is_stopped_fails_calls_at_once_when_its_connection_ends(
    state: SupervisionState,
) -> None:
    """An actor mesh its owner handed out, whose owner stopped: no failure, no grace wait,
    the reason the proc gave (``ProcRetired``)."""
    why = say.why_proc_stopped("q1", "its owner stopped")
    started = CallStarted(1, "far-1", frozenset({0, 1}), "get", addrs={0: "q0", 1: "q1"},
                          cause_id="c1")
    assert state.handle(started, ProcRetired("q1", "its owner stopped", cause_id="r")) == []
    assert state.handle(ConnectionLost("q1", "EOF", cause_id="lost")) == [
        FailCalls((1,), f"Endpoint call far-1.get() failed: rank 1 of mesh 'far-1' {why}",
                  None, cause_id="lost"),
    ]
    again = CallStarted(2, "far-1", frozenset({1}), "get", addrs={1: "q1"}, cause_id="c2")
    assert state.handle(again) == [  # refused at once, with the same words
        FailCalls((2,), f"Endpoint call far-1.get() failed: rank 1 of mesh 'far-1' {why}",
                  None, cause_id="c2"),
    ]
    assert state.verdicts().addrs["q1"] == why


def test_a_proc_that_says_it_is_stopped_still_reports_the_loss_of_its_owners_members(
    state: SupervisionState,
) -> None:
    """Its own owner did not stop it (its worker got SIGTERM, say): a failure to report."""
    state.handle(spawn("w-1", {0: "p0"}), ProcRetired("p0", "its worker got SIGTERM",
                                                      cause_id="r"))
    actions = state.handle(killed("p0", cause="was killed by signal 15 (SIGTERM)"))
    assert [type(a) for a in actions] == [RunRootHook]


# -- rule 6: the story and impossible events ----------------------------------------------------
def test_story_follows_a_mesh_and_a_proc(state: SupervisionState) -> None:
    state.handle(spawn("w-1", {0: "p0"}), spawn("v-1", {0: "p5"}), call(1, "w-1", [0]),
                 ConnectionLost("p0", "EOF", cause_id="eof"), killed("p0"),
                 GraceExpired("p0", cause_id="timer"))
    kinds = [type(e.item).__name__ for e in state.story("w-1")]
    assert kinds == ["MeshSpawned", "CallStarted", "ConnectionLost", "StartGraceTimer",
                     "ProcExited", "FailCalls", "RunRootHook", "GraceExpired"]
    assert [(type(e.item).__name__, e.cause_id) for e in state.story("p0")][-4:] == [
        ("StartGraceTimer", "eof"), ("ProcExited", "reap"), ("FailCalls", "reap"),
        ("GraceExpired", "timer")]
    assert [type(e.item).__name__ for e in state.story(1)] == ["CallStarted", "FailCalls"]
    assert [type(e.item).__name__ for e in state.story("v-1")] == ["MeshSpawned"]
    assert "RunRootHook" in str(state.story("w-1#1")[0])


def test_story_is_bounded() -> None:
    state = SupervisionState(story_size=3)
    state.handle(*(spawn(f"m-{i}", {0: f"p{i}"}) for i in range(10)))
    assert state.statistics().story_entries == 3
    assert state.story("m-0") == []
    assert [e.seq for e in state.story("m-8", "m-9")] == [9, 10]


def test_supervise_done_for_an_unknown_failure_is_invalid(state: SupervisionState) -> None:
    _delivered(state)
    with pytest.raises(InvalidTransition) as info:
        state.handle(SuperviseDone("other-1", "w-1#1", True, cause_id="sv"))
    text = str(info.value)
    assert "no failure 'w-1#1' was delivered to 'other-1'" in text
    assert "ActorFailed" in text and "DeliverToOwner" in text  # the story of w-1
    assert isinstance(info.value, InternalError)
    # The delivery is still pending and can be answered properly.
    assert state.handle(SuperviseDone("mgr-1", "w-1#1", True, cause_id="sv2")) == []
    with pytest.raises(InvalidTransition):
        state.handle(SuperviseDone("mgr-1", "w-1#1", True, cause_id="sv3"))


def test_invalid_transition_keeps_the_actions_of_earlier_events(
    state: SupervisionState,
) -> None:
    state.handle(spawn("w-1", {0: "p0"}))
    with pytest.raises(InvalidTransition) as info:
        state.handle(ConnectionLost("p0", "EOF", cause_id="eof"),
                     GraceExpired("p9", cause_id="timer"))
    assert info.value.actions == [StartGraceTimer("p0", 0.25, cause_id="eof")]
    assert info.value.event == GraceExpired("p9", cause_id="timer")


@pytest.mark.parametrize(
    ("events", "why"),
    [
        ([spawn("w-1", {0: "p0"})], "mesh 'w-1' was already spawned"),
        ([call(1, "nope-1", [0])], "mesh 'nope-1' is not known here"),
        ([call(1, "w-1", [0, 3])], "mesh 'w-1' has no rank 3"),
        ([call(1, "w-1", [0]), call(1, "w-1", [0])], "call 1 is already pending"),
        ([ActorFailed("w-1", 5, actor_failure("w-1", 5), cause_id="x")], "has no rank 5"),
        ([ActorFailed("z-1", 0, actor_failure("z-1", 0), cause_id="x")], "'z-1' was not spawned"),
        ([StopFinished("w-1", cause_id="x")], "mesh 'w-1' was never stopped"),
        ([StopFinished("z-1", cause_id="x")], "mesh 'z-1' was not spawned here"),
        ([GraceExpired("p0", cause_id="x")], "no grace timer was started for p0"),
        ([HookDone("w-1#1", True, cause_id="x")], "no failure 'w-1#1' was given to the root"),
        ([killed("p3"), spawn("v-1", {0: "p3"})], "spawned on dead procs ['p3']"),
    ],
)
def test_impossible_events(state: SupervisionState, events: list[Any], why: str) -> None:
    state.handle(spawn("w-1", {0: "p0"}))
    with pytest.raises(InvalidTransition, match="impossible") as info:
        state.handle(*events)
    assert why in str(info.value)


def test_hook_done_for_a_delivery_to_an_actor_is_invalid(state: SupervisionState) -> None:
    _delivered(state)
    with pytest.raises(InvalidTransition, match="root hook"):
        state.handle(HookDone("w-1#1", True, cause_id="h"))


def test_not_an_event(state: SupervisionState) -> None:
    with pytest.raises(TypeError, match="not a supervision event"):
        state.handle("ProcExited")  # type: ignore[arg-type]


def test_finishing_a_call_the_machine_failed_is_harmless(state: SupervisionState) -> None:
    state.handle(spawn("w-1", {0: "p0"}), call(1, "w-1", [0]), killed("p0"))
    assert state.handle(CallFinished(1, cause_id="late")) == []


# -- the pieces ---------------------------------------------------------------------------------
def test_transition_table_reports_only_first_losses_of_live_members() -> None:
    reported = {key for key, (_, report) in TRANSITIONS.items() if report}
    assert reported == {(RankState.RUNNING, False, Loss.ACTOR_FAILED),
                        (RankState.RUNNING, False, Loss.PROC_CRASHED)}
    assert all(key[0] is RankState.RUNNING for key in TRANSITIONS)


def test_events_and_actions_are_frozen_and_own_their_containers() -> None:
    members = {0: "p0"}
    event = spawn("w-1", members)
    members[1] = "p1"
    assert dict(event.members) == {0: "p0"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.uid = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        event.members[2] = "p2"  # type: ignore[index]
    assert not hasattr(event, "__dict__")
    started = CallStarted(1, "w-1", [0, 1], "step", cause_id="c")  # type: ignore[arg-type]
    assert started.ranks == frozenset({0, 1})
    exited = ProcExited("p0", "x", False, 1, "h", ["a"], cause_id="c")  # type: ignore[arg-type]
    assert exited.last_lines == ("a",)
    action = StartGraceTimer("p0", 0.25, cause_id="c")
    assert pickle.loads(pickle.dumps(action)) == action
    assert not hasattr(action, "__dict__")


def test_statistics_and_repr(state: SupervisionState) -> None:
    state.handle(spawn("w-1", {0: "p0", 1: "p1"}), call(1, "w-1", [1]), killed("p0"))
    stats = state.statistics()
    assert (stats.meshes, stats.failed_ranks, stats.pending_calls, stats.dead_procs,
            stats.pending_deliveries) == (1, 1, 1, 1, 1)
    assert repr(state) == ("<SupervisionState meshes=1 pending_calls=1 failed_ranks=1 "
                           "dead_procs=1>")
