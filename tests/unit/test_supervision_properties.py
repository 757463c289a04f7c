"""Property tests of the supervision state machine against a small independent model.

Hypothesis drives random, valid sequences of spawns, stops, calls, actor failures, proc exits,
lost connections, timer expiries and supervision answers. After every step the test checks:

(a) every pending call that involves a failed or exited rank, a dead or unreachable proc, or
    a finished stop is failed in that very step, so it ends up in exactly one ``FailCalls``;
(b) no call is failed twice, and no call is failed without such a reason;
(c) at most one delivery per (mesh, rank), and exactly one for each first failure of a member
    of a mesh that was not stopped.

Stops may take a whole mesh (``MeshStopped``) or some of its ranks (``RanksStopped``), of a
mesh spawned here or elsewhere (then they only refuse new calls and spawns). At the
end of a run, the published ``Verdicts`` refuse a new call exactly when the model says so,
which includes a proc whose connection was just lost (new calls do not wait for the grace).

The model shares no code with `regency._supervision`: it only remembers which ranks were
lost, which procs died, and which meshes were stopped.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from regency._supervision import (
    Action,
    ActorFailed,
    CallFinished,
    CallStarted,
    ConnectionLost,
    DeliverToOwner,
    Event,
    FailCalls,
    FailFast,
    FailOwner,
    GraceExpired,
    HookDone,
    MeshKind,
    MeshSpawned,
    MeshStopped,
    ProcExited,
    ProcRetired,
    RanksStopped,
    RunRootHook,
    StartGraceTimer,
    StopFinished,
    SuperviseDone,
    SupervisionState,
)
from regency.errors import MeshFailure

PROFILE = settings(max_examples=100, deadline=None)
ADDRS = [f"p{i}" for i in range(6)]
OPS = ["spawn", "spawn_procs", "stop", "stop_ranks", "stop_finished", "call", "call_foreign",
       "finish", "actor_failed", "proc_exited", "connection_lost", "grace_expired", "answer",
       "stop_foreign", "proc_retired"]
FAR = "far"  # a mesh spawned elsewhere: calls to it name their procs, stops are refusals only


@dataclasses.dataclass
class Model:
    """What the test knows, independently of the machine."""

    meshes: dict[str, dict[int, str]] = dataclasses.field(default_factory=dict)
    owners: dict[str, str | None] = dataclasses.field(default_factory=dict)
    proc_meshes: set[str] = dataclasses.field(default_factory=set)
    stopped: set[str] = dataclasses.field(default_factory=set)
    stopped_ranks: set[tuple[str, int]] = dataclasses.field(default_factory=set)
    retired: set[str] = dataclasses.field(default_factory=set)  # procs of stopped proc meshes
    said_retired: set[str] = dataclasses.field(default_factory=set)  # ProcRetired heard
    ended: set[str] = dataclasses.field(default_factory=set)  # retired, connection lost
    finished: set[str] = dataclasses.field(default_factory=set)  # StopFinished seen
    lost_ranks: set[tuple[str, int]] = dataclasses.field(default_factory=set)
    dead: set[str] = dataclasses.field(default_factory=set)
    unreachable: set[str] = dataclasses.field(default_factory=set)
    timers: set[str] = dataclasses.field(default_factory=set)
    calls: dict[int, tuple[str, dict[int, str]]] = dataclasses.field(default_factory=dict)
    pending: set[int] = dataclasses.field(default_factory=set)
    failed: Counter[int] = dataclasses.field(default_factory=Counter)
    delivered: Counter[tuple[str, int]] = dataclasses.field(default_factory=Counter)
    expected_deliveries: set[tuple[str, int]] = dataclasses.field(default_factory=set)
    open_deliveries: dict[str, str | None] = dataclasses.field(default_factory=dict)
    next_call: int = 0

    def is_stopped(self, uid: str, addr: str, rank: int | None = None) -> bool:
        return (uid in self.stopped or (uid, rank) in self.stopped_ranks
                or (uid in self.meshes and addr in self.retired))

    def stopping(self, addr: str) -> bool:
        """Whether the proc at ``addr`` is stopped on purpose (a proc mesh of ours stopped,
        or it said so): new calls to it are refused, whoever spawned their mesh."""
        return addr in self.retired or addr in self.said_retired

    def doomed(self, call_id: int, *, new: bool) -> bool:
        """Whether the call can no longer be answered (``new``: it is being started)."""
        uid, addrs = self.calls[call_id]
        for rank, addr in addrs.items():
            if (uid, rank) in self.lost_ranks or addr in self.dead or addr in self.unreachable:
                return True
            if uid in self.finished or addr in self.ended:
                return True
            # a proc stopped on purpose refuses new calls, whoever spawned its mesh
            if new and (self.is_stopped(uid, addr, rank) or self.stopping(addr)):
                return True
        return False

    def lose(self, uid: str, rank: int, reportable: bool) -> None:
        """A member is lost: the first loss of a live member of a running mesh is reported."""
        if (uid, rank) in self.lost_ranks:
            return
        self.lost_ranks.add((uid, rank))
        if reportable and not self.is_stopped(uid, self.meshes[uid][rank], rank):
            self.expected_deliveries.add((uid, rank))


def next_event(draw: st.DrawFn, m: Model, step: int) -> Event | None:
    """One valid event for the model's current state, applied to the model; None to skip."""
    op = draw(st.sampled_from(OPS))
    cid = f"s{step}"
    live = [a for a in ADDRS if a not in m.dead]
    if op in ("spawn", "spawn_procs") and live:
        uid = f"m{len(m.meshes)}"
        if op == "spawn":
            addrs = draw(st.lists(st.sampled_from(live), min_size=1, max_size=3))
        else:
            addrs = draw(st.lists(st.sampled_from(live), min_size=1, max_size=3, unique=True))
            m.proc_meshes.add(uid)
        m.meshes[uid] = dict(enumerate(addrs))
        m.owners[uid] = draw(st.sampled_from([None, "owner-a", "owner-b"]))
        kind: MeshKind = "proc" if op == "spawn_procs" else "actor"
        return MeshSpawned(uid, m.owners[uid], kind, uid, m.meshes[uid], "W", cause_id=cid)
    if op in ("stop", "stop_finished") and m.meshes:
        pool = sorted(m.meshes) if op == "stop" else sorted(m.stopped & m.meshes.keys())
        if not pool:
            return None
        uid = draw(st.sampled_from(pool))
        if op == "stop":
            if uid not in m.stopped and uid in m.proc_meshes:
                m.retired.update(m.meshes[uid].values())
            m.stopped.add(uid)
            return MeshStopped(uid, "test", cause_id=cid)
        m.finished.add(uid)
        for rank in m.meshes[uid]:
            m.lose(uid, rank, reportable=False)
        return StopFinished(uid, cause_id=cid)
    if op == "stop_ranks" and m.meshes:
        uid = draw(st.sampled_from(sorted(m.meshes)))
        ranks = draw(st.sets(st.sampled_from(sorted(m.meshes[uid])), min_size=1))
        m.stopped_ranks.update((uid, r) for r in ranks)
        if uid in m.proc_meshes:
            m.retired.update(m.meshes[uid][r] for r in ranks)
        return RanksStopped(uid, frozenset(ranks), "test", cause_id=cid)
    if op == "stop_foreign":
        if draw(st.booleans()):
            m.stopped.add(FAR)
            return MeshStopped(FAR, "test", cause_id=cid)
        ranks = draw(st.sets(st.integers(0, 2), min_size=1))
        m.stopped_ranks.update((FAR, r) for r in ranks)
        return RanksStopped(FAR, frozenset(ranks), "test", cause_id=cid)
    if op == "call" and m.meshes:
        uid = draw(st.sampled_from(sorted(m.meshes)))
        ranks = draw(st.sets(st.sampled_from(sorted(m.meshes[uid])), min_size=1))
        call_id = m.next_call = m.next_call + 1
        m.calls[call_id] = (uid, {r: m.meshes[uid][r] for r in ranks})
        m.pending.add(call_id)
        return CallStarted(call_id, uid, frozenset(ranks), "ep", cause_id=cid)
    if op == "call_foreign":
        addrs = draw(st.lists(st.sampled_from(ADDRS), min_size=1, max_size=3))
        call_id = m.next_call = m.next_call + 1
        m.calls[call_id] = (FAR, dict(enumerate(addrs)))
        m.pending.add(call_id)
        return CallStarted(call_id, FAR, frozenset(range(len(addrs))), "ep",
                           addrs=dict(enumerate(addrs)), cause_id=cid)
    if op == "finish" and m.calls:
        call_id = draw(st.sampled_from(sorted(m.calls)))  # possibly already failed
        m.pending.discard(call_id)
        return CallFinished(call_id, cause_id=cid)
    if op == "actor_failed" and m.meshes:
        uid = draw(st.sampled_from(sorted(m.meshes)))
        rank = draw(st.sampled_from(sorted(m.meshes[uid])))
        m.lose(uid, rank, reportable=True)
        return ActorFailed(uid, rank, MeshFailure(uid, ranks=[rank], cause="E"), cause_id=cid)
    if op == "proc_exited":
        addr = draw(st.sampled_from(ADDRS))
        expected = draw(st.booleans())
        if addr not in m.dead:
            m.dead.add(addr)
            for uid, members in m.meshes.items():
                for rank, a in members.items():
                    if a == addr:
                        m.lose(uid, rank, reportable=not expected)
        return ProcExited(addr, "died", expected, 1, "h", cause_id=cid)
    if op == "connection_lost":
        addr = draw(st.sampled_from(ADDRS))
        if m.stopping(addr) and addr not in m.dead | m.timers | m.unreachable:
            m.ended.add(addr)  # its end was announced: its calls fail at once, no timer
        return ConnectionLost(addr, "EOF", cause_id=cid)
    if op == "proc_retired":
        addr = draw(st.sampled_from(ADDRS))
        m.said_retired.add(addr)
        return ProcRetired(addr, "its owner stopped", cause_id=cid)
    if op == "grace_expired" and m.timers:
        addr = draw(st.sampled_from(sorted(m.timers)))
        m.timers.discard(addr)
        if addr not in m.dead:
            m.unreachable.add(addr)
        return GraceExpired(addr, cause_id=cid)
    if op == "answer" and m.open_deliveries:
        failure_id = draw(st.sampled_from(sorted(m.open_deliveries)))
        owner = m.open_deliveries.pop(failure_id)
        yes = draw(st.booleans())
        if owner is None:
            return HookDone(failure_id, yes, cause_id=cid)
        error = draw(st.sampled_from([None, "KeyError: 'x'"]))
        return SuperviseDone(owner, failure_id, yes, error=error, cause_id=cid)
    return None


def check_step(m: Model, event: Event, actions: list[Action]) -> None:
    """Compare one step's actions with the model; update the model's view of the machine."""
    failed_now: set[int] = set()
    for action in actions:
        assert action.cause_id == event.cause_id
        if isinstance(action, FailCalls):
            for call_id in action.call_ids:
                assert call_id in m.pending, f"call {call_id} failed twice or after finishing"
                assert call_id not in failed_now
                failed_now.add(call_id)
                m.failed[call_id] += 1
        elif isinstance(action, (DeliverToOwner, RunRootHook)):
            uid = action.failure.mesh_name
            owner = action.owner_uid if isinstance(action, DeliverToOwner) else None
            assert owner == m.owners[uid]
            m.open_deliveries[action.failure_id] = owner
            for rank in action.failure.ranks:
                m.delivered[uid, rank] += 1
                assert m.delivered[uid, rank] == 1, f"{uid} rank {rank} delivered twice"
        elif isinstance(action, StartGraceTimer):
            assert isinstance(event, ConnectionLost) and action.addr not in m.timers
            m.timers.add(action.addr)
        elif isinstance(action, FailOwner):
            assert isinstance(event, SuperviseDone)
            assert action.owner_uid == event.owner_uid == action.failure.mesh_name
            assert action.failure.chain
        else:
            assert isinstance(action, FailFast)
            assert isinstance(event, HookDone)
    if isinstance(event, SuperviseDone):
        unhandled = not event.handled or event.error is not None
        assert [type(a) for a in actions] == ([FailOwner] if unhandled else [])
    if isinstance(event, HookDone):
        assert [type(a) for a in actions] == ([FailFast] if event.exit_requested else [])
    new_call = event.call_id if isinstance(event, CallStarted) else None
    for call_id in sorted(m.pending):
        should = m.doomed(call_id, new=call_id == new_call)
        assert should == (call_id in failed_now), (call_id, m.calls[call_id], actions)
    m.pending -= failed_now
    assert set(m.delivered) == m.expected_deliveries


@st.composite
def runs(draw: st.DrawFn) -> tuple[SupervisionState, Model, list[Event], list[Action]]:
    """A random run, checked step by step; with its events and all the actions taken."""
    state, m = SupervisionState(story_size=64), Model()
    events: list[Event] = []
    actions: list[Action] = []
    for step in range(draw(st.integers(1, 40))):
        event = next_event(draw, m, step)
        if event is not None:
            out = state.handle(event)
            check_step(m, event, out)
            events.append(event)
            actions += out
    return state, m, events, actions


def plain(actions: list[Action]) -> list[tuple[Any, ...]]:
    """Actions as comparable tuples; failure records become dicts of their fields."""

    def value(v: Any) -> Any:
        return dataclasses.asdict(v) if isinstance(v, MeshFailure) else v

    return [(type(a).__name__, *(value(getattr(a, f.name)) for f in dataclasses.fields(a)))
            for a in actions]


@PROFILE
@given(runs())
def test_random_runs_fail_each_doomed_call_once_and_deliver_each_rank_once(
    run: tuple[SupervisionState, Model, list[Event], list[Action]],
) -> None:
    state, m, events, actions = run
    assert all(count == 1 for count in m.failed.values())
    stats = state.statistics()
    assert stats.pending_calls == len(m.pending)
    assert stats.dead_procs == len(m.dead)
    assert stats.pending_deliveries == len(m.open_deliveries)
    assert stats.story_entries <= 64
    for uid, members in m.meshes.items():
        # A query agrees with the model about every rank, and never changes anything.
        for rank, addr in members.items():
            refused = state.check_call(uid, [rank]) is not None
            gone = ((uid, rank) in m.lost_ranks or addr in m.dead or addr in m.unreachable
                    or m.is_stopped(uid, addr, rank) or m.stopping(addr))
            assert refused == gone
    assert state.statistics() == stats
    # The published verdicts refuse exactly what the model refuses, a just-lost connection too.
    verdicts = state.verdicts()
    lost = m.timers - m.dead
    for uid, members in m.meshes.items():
        for rank, addr in members.items():
            gone = ((uid, rank) in m.lost_ranks or addr in m.dead or addr in m.unreachable
                    or m.is_stopped(uid, addr, rank) or addr in lost or m.stopping(addr))
            assert (verdicts.call_refusal(uid, [(rank, addr)]) is not None) == gone
    for addr in ADDRS:  # a mesh spawned elsewhere: its procs, and stops made here
        for rank in range(3):
            bad = (addr in m.dead or addr in m.unreachable or addr in lost
                   or m.is_stopped(FAR, addr, rank) or m.stopping(addr))
            assert (verdicts.call_refusal(FAR, [(rank, addr)]) is not None) == bad
    assert state.verdicts() is verdicts  # queries change nothing, and reuse the snapshot
    # Handling the same events in one batch gives the same actions.
    assert plain(SupervisionState().handle(*events)) == plain(actions)


@PROFILE
@given(runs())
def test_stopped_members_refuse_spawns_and_calls_but_pending_calls_live_on(
    run: tuple[SupervisionState, Model, list[Event], list[Action]],
) -> None:
    state, m, _, _ = run
    verdicts = state.verdicts()
    for uid in sorted(m.proc_meshes):
        members = list(m.meshes[uid].items())
        refusal = verdicts.spawn_refusal(uid, uid, members)
        stopped = uid in m.stopped or any((uid, r) in m.stopped_ranks for r, _ in members)
        dead = any(a in m.dead or a in m.unreachable or a in m.timers or m.stopping(a)
                   for _, a in members)
        if stopped:
            assert refusal is not None and refusal[1] and "stopped" in refusal[0]
        else:
            assert (refusal is not None) == dead
            assert refusal is None or not refusal[1]
    # a proc mesh spawned elsewhere and stopped here (its kind is not known): no spawn on it
    for rank in range(3):
        refusal = verdicts.spawn_refusal(FAR, FAR, [(rank, "p9")])
        assert (refusal is not None) == m.is_stopped(FAR, "p9", rank)
        assert refusal is None or refusal[1]
        assert verdicts.stopped_ranks(FAR, [rank]) == ([rank] if refusal else [])
    # a stop of some ranks fails nothing pending, and is idempotent
    for uid in sorted(m.meshes):
        ranks = frozenset(m.meshes[uid])
        assert state.handle(RanksStopped(uid, ranks, "again", cause_id="x")) == []
        assert state.handle(RanksStopped(uid, ranks, "twice", cause_id="y")) == []
        assert state.statistics().pending_calls == len(m.pending)
