"""The rules of supervision for one runtime, as a pure state machine.

Theory of operation
===================

One :class:`SupervisionState` belongs to one runtime (one OS process: the controller or a
proc). It knows the meshes that runtime spawned (and so owns), the calls it has pending, and
the procs it has heard are dead. The runtime feeds it events (:mod:`._events`: facts, in the
past tense) through :meth:`SupervisionState.handle` and executes the actions it returns
(:mod:`._actions`: imperatives). It does no I/O and reads no clock: a timer is an action
(:class:`StartGraceTimer`) and its expiry an event (:class:`GraceExpired`). Every action
carries the ``cause_id`` of the event that produced it, and both go into a bounded story.

State. Each member (mesh, rank) of an owned mesh is in one :class:`RankState`::

    RUNNING --(actor failed, or its proc crashed)--> FAILED   reported to the owner, once
    RUNNING --(its proc exited when asked to)------> EXITED   silent
    RUNNING --(anything, once the mesh is stopped)-> EXITED   silent
    FAILED, EXITED: final; later losses of the rank change nothing and report nothing

A mesh is *stopped* from :class:`MeshStopped` on; a member is also stopped when it lives on a
proc of a stopped proc mesh. A proc address is *dead* from :class:`ProcExited` on, and
*unreachable* when its connection broke and no exit status came within the grace period.

Rules. They all live in this file: the table :data:`TRANSITIONS` decides what a member's loss
does, the rest is the handlers below.

1. A failure of a member of an owned mesh (:class:`ActorFailed`, or an unexpected
   :class:`ProcExited` of its proc) is delivered exactly once per (mesh, rank): to the owner
   actor (:class:`DeliverToOwner`) or, for a mesh the root client owns, to the root hook
   (:class:`RunRootHook`). A proc hosting members of several meshes gives one failure per
   mesh, naming all its ranks of that mesh; a rank already failed or stopped is left out.
2. Every pending call that waits on a rank which left RUNNING, on a dead proc, or on an
   unreachable one fails at once (:class:`FailCalls`), with a message naming the mesh, the
   endpoint, the ranks and the cause. Calls that do not wait on them are untouched: slices
   that exclude failed ranks keep working. A lost connection is only a hint: the calls wait
   for :class:`GraceExpired` (started by :class:`StartGraceTimer`), unless the exit status
   arrives first, which fails them with the real cause and makes the expiry a no-op.
3. A stopped mesh reports nothing any more. Calls pending on it when it was stopped may still
   be answered; they fail ("the mesh was stopped") when its procs exit or the stop finishes.
4. A new call (:meth:`SupervisionState.check_call`, the published :class:`Verdicts`, and
   :class:`CallStarted` itself, which fails a call at once rather than let it hang) is
   refused when its mesh is stopped, one of its ranks failed, exited or was stopped, or its
   proc is dead, unreachable or just lost its connection. A mesh spawned elsewhere may be
   stopped from here too (:class:`MeshStopped`, :class:`RanksStopped` of an unknown uid):
   then only new calls from here are refused; nothing else is known of it. A spawn
   (:meth:`SupervisionState.check_spawn`) is refused on a stopped proc mesh or one with dead
   or unreachable procs in the slice used. Queries do not change state.
5. :class:`SuperviseDone` handled: done. Not handled, or ``__supervise__`` raised: the owner
   fails itself (:class:`FailOwner`), with a new failure whose chain starts with the report
   of the one it did not handle. :class:`HookDone` with ``exit_requested``: fail fast
   (:class:`FailFast`, exit code 1); without it the user's hook chose to carry on.
6. Duplicates are harmless (a second exit status of a proc, a second report of a failed
   rank, a second stop), but an event that cannot happen (a call to an unknown mesh, an
   answer to a delivery that was never made) raises :class:`InvalidTransition`, whose text
   includes the story of what it mentions. Events before it in the same ``handle`` call have
   been applied; their actions are on the exception.
7. :class:`RankRespawned` (an elastic mesh replaced a dead proc): the members it hosted move
   to the new address and are RUNNING again, their failures forgotten; the old address stays
   dead. Stopped meshes and stopped ranks stay as they are. Only a dead (or lost) proc is
   replaced.

What it must not know: how failures travel between processes, how a call is executed, the
coordinates of a rank, anything about time except the grace period it asks for.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Final

from regency._supervision import _reasons as say
from regency._supervision._actions import (
    Action,
    DeliverToOwner,
    FailCalls,
    FailFast,
    FailOwner,
    RunRootHook,
    StartGraceTimer,
)
from regency._supervision._events import (
    ActorFailed,
    CallFinished,
    CallStarted,
    ConnectionLost,
    Event,
    GraceExpired,
    HookDone,
    MeshKind,
    MeshSpawned,
    MeshStopped,
    ProcExited,
    ProcRetired,
    RankRespawned,
    RanksStopped,
    StopFinished,
    SuperviseDone,
)
from regency._supervision._story import Story, StoryEntry, StoryKey, render_story
from regency.errors import InternalError, MeshFailure

__all__ = [
    "DEFAULT_GRACE_S",
    "TRANSITIONS",
    "InvalidTransition",
    "Loss",
    "RankState",
    "SupervisionState",
    "SupervisionStatistics",
    "Verdicts",
]

DEFAULT_GRACE_S = 0.25
"""How long a lost connection waits for the proc's exit status before failing calls."""


class RankState(enum.Enum):
    """Where one member (mesh, rank) of an owned mesh stands."""

    RUNNING = "running"
    FAILED = "failed"  # its failure was taken in: reported to the owner
    EXITED = "exited"  # gone without a report: an expected exit, or a stopped mesh


class Loss(enum.Enum):
    """How a member was lost."""

    ACTOR_FAILED = "actor failed"  # ActorFailed
    PROC_CRASHED = "proc crashed"  # ProcExited(expected=False)
    PROC_EXITED = "proc exited"  # ProcExited(expected=True)


_R, _F, _X = RankState.RUNNING, RankState.FAILED, RankState.EXITED
_A, _C, _E = Loss.ACTOR_FAILED, Loss.PROC_CRASHED, Loss.PROC_EXITED

TRANSITIONS: Final[Mapping[tuple[RankState, bool, Loss], tuple[RankState, bool]]] = {
    # (state, stopped, loss) -> (new state, report to the owner)
    (_R, False, _A): (_F, True),
    (_R, False, _C): (_F, True),
    (_R, False, _E): (_X, False),
    (_R, True, _A): (_X, False),
    (_R, True, _C): (_X, False),
    (_R, True, _E): (_X, False),
}
"""What a loss does to a member. Any (state, stopped, loss) not listed changes nothing and
reports nothing: FAILED and EXITED are final, so a rank is reported at most once."""


class InvalidTransition(InternalError):
    """An event that cannot happen in the current state: a bug in the runtime or here.

    Attributes:
        event: the offending event.
        story: the entries of the story that mention what the event mentions.
        actions: actions of the events handled before it in the same ``handle`` call, which
            have been applied and must still be executed.
    """

    def __init__(self, event: Event, why: str, story: list[StoryEntry]) -> None:
        self.event = event
        self.story = story
        self.actions: list[Action] = []
        super().__init__(f"impossible {type(event).__name__}: {why}\n"
                         f"event: {event!r}\nstory:\n{render_story(story)}")


@dataclass(frozen=True, slots=True)
class SupervisionStatistics:
    """Counts describing a :class:`SupervisionState`, for introspection and tests."""

    meshes: int
    stopped_meshes: int
    failed_ranks: int
    pending_calls: int
    pending_deliveries: int
    dead_procs: int
    unreachable_procs: int
    grace_timers: int
    story_entries: int


@dataclass(slots=True)
class _Mesh:
    """An owned mesh and the state of its members."""

    uid: str
    owner_uid: str | None
    kind: MeshKind
    name: str
    actor_class: str
    members: dict[int, str]
    ranks: dict[int, RankState]
    why: dict[int, str] = field(default_factory=dict)  # rank -> why it left RUNNING
    failures: dict[int, MeshFailure] = field(default_factory=dict)
    stopped: str | None = None
    stopped_ranks: dict[int, str] = field(default_factory=dict)  # rank -> stop reason


@dataclass(frozen=True, slots=True)
class _Call:
    """A pending call: the ranks of one mesh it waits on, and their procs."""

    call_id: int
    uid: str
    name: str
    endpoint: str
    ranks: frozenset[int]
    addrs: Mapping[int, str]

    def ranks_on(self, addr: str) -> list[int]:
        return sorted(rank for rank, a in self.addrs.items() if a == addr)


@dataclass(frozen=True, slots=True)
class _Delivery:
    """A failure handed to an owner (or the root hook) that has not been answered yet."""

    owner_uid: str | None
    failure: MeshFailure
    uid: str


class _Failing:
    """The calls one event fails, grouped into one FailCalls per (message, failure)."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, int], tuple[list[int], MeshFailure | None, set[str]]] = {}

    def add(self, call: _Call, message: str, failure: MeshFailure | None) -> None:
        ids, _, keys = self.groups.setdefault((message, id(failure)), ([], failure, set()))
        ids.append(call.call_id)
        keys.update([call.uid, *call.addrs.values()])

    def __iter__(self) -> Iterator[tuple[str, tuple[int, ...], MeshFailure | None, set[str]]]:
        for (message, _), (ids, failure, keys) in self.groups.items():
            yield message, tuple(ids), failure, keys


class SupervisionState:
    """The supervision rules of one runtime: events in, actions out (see the module docs).

    Args:
        grace_s: how long a lost connection waits for the exit status of its proc.
        story_size: how many events and actions the story keeps.

    Example::

        state = SupervisionState()
        state.handle(MeshSpawned("w-1", None, "actor", "w", {0: "p0", 1: "p1"}, cause_id="s1"),
                     CallStarted(7, "w-1", frozenset({0, 1}), "step", cause_id="c7"))
        state.handle(ProcExited("p1", "was killed by signal 9", False, 4242, "h",
                                cause_id="x1"))
        # -> [FailCalls((7,), "Endpoint call w.step() failed: rank 1 ...", failure),
        #     RunRootHook(failure, "w-1#1")]
    """

    def __init__(self, *, grace_s: float = DEFAULT_GRACE_S, story_size: int = 4096) -> None:
        self.grace_s = grace_s
        self._meshes: dict[str, _Mesh] = {}
        self._hosted: dict[str, dict[str, list[int]]] = {}  # addr -> owned uid -> ranks there
        self._calls: dict[int, _Call] = {}
        self._waiting: dict[str, dict[int, None]] = {}  # addr -> ids of calls waiting on it
        self._dead: dict[str, str] = {}  # addr -> exit cause ("was killed by ...")
        self._timers: set[str] = set()  # addrs with a grace timer running
        self._lost: dict[str, str] = {}  # addr -> reason, while its grace timer runs
        self._unreachable: dict[str, str] = {}  # addr -> reason, after the grace ran out
        self._retired: dict[str, str] = {}  # addr -> stop reason of its stopped proc mesh
        self._stopped_procs: dict[str, str] = {}  # addr -> why: the proc said so (ProcRetired)
        # meshes spawned elsewhere that this runtime stopped: uid -> rank -> reason (-1: all)
        self._foreign_stops: dict[str, dict[int, str]] = {}
        self._deliveries: dict[str, _Delivery] = {}
        self._delivered = 0
        self._story = Story(story_size)
        self._verdicts: Verdicts | None = None  # the last published snapshot, while valid

    # -- the one entry point ---------------------------------------------------------------------
    def handle(self, *events: Event) -> list[Action]:
        """Apply ``events`` in order and return the actions they call for, in order.

        Raises:
            InvalidTransition: an event cannot happen now; the earlier ones were applied and
                their actions are in the exception's ``actions``.
            TypeError: not an event.
        """
        actions: list[Action] = []
        for event in events:
            handler = _HANDLERS.get(type(event))
            if handler is None:
                raise TypeError(f"not a supervision event: {event!r}")
            self._story.record(event, self._keys_of_event(event))
            if type(event) not in _KEEP_VERDICTS:
                self._verdicts = None
            try:
                out = handler(self, event)
            except InvalidTransition as exc:
                exc.actions = actions
                raise
            actions.extend(out)
        return actions

    # -- queries ---------------------------------------------------------------------------------
    def check_call(
        self, uid: str, ranks: Iterable[int], endpoint: str | None = None
    ) -> str | None:
        """Why a new call to ``ranks`` of mesh ``uid`` must fail at once, or ``None``.

        The reason names the mesh, the ranks and the cause; with ``endpoint`` it is the whole
        message (``"Endpoint call <name>.<endpoint>() failed: ..."``). A mesh this runtime did
        not spawn is not known here and gives ``None``; ranks the mesh does not have are
        ignored.
        """
        mesh = self._meshes.get(uid)
        if mesh is None:
            return None
        wanted = [rank for rank in ranks if rank in mesh.members]
        addrs = {rank: mesh.members[rank] for rank in wanted}
        reason = self._refusal(mesh, uid, addrs)
        if reason is None or endpoint is None:
            return reason
        return say.call_failed(mesh.name, endpoint, reason)

    def undeliverable(self, uid: str, endpoint: str, addr: str, why: str) -> str | None:
        """The refusal of a call to mesh ``uid`` whose frame for proc ``addr`` could not be
        written (its connection is lost): which ranks, of which mesh, and why, like every
        other refusal. ``None`` when this runtime does not own the mesh or no rank of it
        lives at ``addr``."""
        mesh = self._meshes.get(uid)
        if mesh is None:
            return None
        ranks = [rank for rank, at in mesh.members.items() if at == addr]
        if not ranks:
            return None
        return say.call_failed(mesh.name, endpoint,
                               f"{say.subject(uid, ranks)} {say.why_undeliverable(addr, why)}")

    def check_spawn(self, proc_mesh_uid: str, ranks: Iterable[int] | None = None) -> str | None:
        """Why actors cannot be spawned on (the ``ranks`` of) a proc mesh, or ``None``.

        Refused: a stopped proc mesh, and one whose procs in the slice used (all of them when
        ``ranks`` is None) are dead or unreachable. A mesh not spawned here gives ``None``.
        """
        mesh = self._meshes.get(proc_mesh_uid)
        if mesh is None:
            return None
        if mesh.stopped is not None:
            return ("`ProcMesh` has already been stopped. "  # Monarch's words, then ours
                    f"Cannot spawn new actors on proc mesh {mesh.name!r} ({mesh.uid}): it was "
                    f"stopped ({mesh.stopped}) and cannot be used again.")
        chosen = mesh.members if ranks is None else [r for r in ranks if r in mesh.members]
        bad = {rank: why for rank in chosen
               if (why := self._addr_trouble(mesh.members[rank])) is not None}
        return say.spawn_refused(mesh.uid, mesh.name, bad) if bad else None

    def verdicts(self) -> Verdicts:
        """An immutable snapshot of every refusal the machine would give now.

        Made once per change (events that cannot change a refusal keep it), so a runtime can
        publish it for callers on other threads, which read it without a lock.
        """
        verdicts = self._verdicts
        if verdicts is None:
            verdicts = self._verdicts = self._snapshot()
        return verdicts

    def _snapshot(self) -> Verdicts:
        ranks: dict[str, dict[int, str]] = {}
        stopped: dict[str, str] = {}
        for mesh in self._meshes.values():
            if mesh.stopped is not None:
                stopped[mesh.uid] = say.why_stopped(mesh.stopped)
                continue
            whys = {rank: why for rank, addr in mesh.members.items()
                    if (why := self._member_why(mesh, rank, addr)) is not None}
            if whys:
                ranks[mesh.uid] = whys
        troubled = [*self._dead, *self._unreachable, *self._retired, *self._stopped_procs]
        addrs = {addr: why for addr in troubled if (why := self._addr_trouble(addr)) is not None}
        for addr, reason in self._lost.items():
            addrs.setdefault(addr, say.why_connection_lost(addr, reason))
        spawn = {uid: (dict.fromkeys(mesh.members, mesh.stopped) if mesh.stopped is not None
                       else dict(mesh.stopped_ranks))
                 for uid, mesh in self._meshes.items()
                 if mesh.kind == "proc" and (mesh.stopped is not None or mesh.stopped_ranks)}
        for uid, stops in self._foreign_stops.items():  # its kind is not known here: both
            if _WHOLE in stops:
                stopped[uid] = say.why_stopped(stops[_WHOLE])
            ranks[uid] = {rank: say.why_ranks_stopped(reason)
                          for rank, reason in stops.items() if rank != _WHOLE}
            spawn[uid] = dict(stops)
        names = {uid: self._meshes[uid].name if uid in self._meshes else uid
                 for uid in {*ranks, *stopped}}
        return Verdicts(_freeze(ranks), MappingProxyType(stopped), MappingProxyType(addrs),
                        _freeze(spawn), MappingProxyType(names))

    def _member_why(self, mesh: _Mesh, rank: int, addr: str) -> str | None:
        """Why a new call to ``rank`` of ``mesh`` is refused for the member itself, or None."""
        why = self._stopped_why(mesh, addr, rank)
        if why is None and mesh.ranks[rank] is not _R:
            why = mesh.why[rank]
        return why

    def failure_of(self, uid: str, rank: int) -> MeshFailure | None:
        """The recorded failure of a member that failed or lost its proc, else ``None``."""
        mesh = self._meshes.get(uid)
        return None if mesh is None else mesh.failures.get(rank)

    def story(self, *keys: StoryKey) -> list[StoryEntry]:
        """The recorded events and actions that mention any of ``keys``, oldest first.

        A key is a mesh uid, an owner uid, a proc address, a failure id, or a call id (int).
        """
        return self._story.about(*keys)

    def statistics(self) -> SupervisionStatistics:
        """Counts of what the machine holds now."""
        return SupervisionStatistics(
            meshes=len(self._meshes),
            stopped_meshes=sum(m.stopped is not None for m in self._meshes.values()),
            failed_ranks=sum(s is _F for m in self._meshes.values() for s in m.ranks.values()),
            pending_calls=len(self._calls),
            pending_deliveries=len(self._deliveries),
            dead_procs=len(self._dead),
            unreachable_procs=len(self._unreachable),
            grace_timers=len(self._timers),
            story_entries=len(self._story),
        )

    def __repr__(self) -> str:
        s = self.statistics()
        return (f"<SupervisionState meshes={s.meshes} pending_calls={s.pending_calls} "
                f"failed_ranks={s.failed_ranks} dead_procs={s.dead_procs}>")

    # -- meshes ----------------------------------------------------------------------------------
    def _on_mesh_spawned(self, ev: MeshSpawned) -> list[Action]:
        if ev.uid in self._meshes:
            raise self._invalid(ev, f"mesh {ev.uid!r} was already spawned")
        if ev.kind not in ("actor", "proc"):
            raise self._invalid(ev, f"unknown mesh kind {ev.kind!r}")
        dead = sorted({addr for addr in ev.members.values() if addr in self._dead})
        if dead:
            raise self._invalid(ev, f"spawned on dead procs {dead}; check_spawn refuses that")
        mesh = _Mesh(ev.uid, ev.owner_uid, ev.kind, ev.name, ev.actor_class,
                     dict(ev.members), dict.fromkeys(ev.members, _R))
        self._meshes[ev.uid] = mesh
        for rank, addr in sorted(ev.members.items()):
            self._hosted.setdefault(addr, {}).setdefault(ev.uid, []).append(rank)
        return []

    def _on_mesh_stopped(self, ev: MeshStopped) -> list[Action]:
        mesh = self._meshes.get(ev.uid)
        if mesh is None:  # spawned elsewhere: only new calls from here are refused
            self._foreign_stops.setdefault(ev.uid, {}).setdefault(_WHOLE, ev.reason)
            return []
        if mesh.stopped is None:
            mesh.stopped = ev.reason
            if mesh.kind == "proc":
                for addr in mesh.members.values():
                    self._retired.setdefault(addr, ev.reason)
        return []

    def _on_ranks_stopped(self, ev: RanksStopped) -> list[Action]:
        mesh = self._meshes.get(ev.uid)
        if mesh is None:  # spawned elsewhere: only new calls from here are refused
            stops = self._foreign_stops.setdefault(ev.uid, {})
            for rank in sorted(ev.ranks):
                stops.setdefault(rank, ev.reason)
            return []
        missing = sorted(ev.ranks - mesh.members.keys())
        if missing:
            raise self._invalid(ev, f"mesh {ev.uid!r} has no {say.ranks_text(missing)}")
        for rank in sorted(ev.ranks):
            if rank not in mesh.stopped_ranks:
                mesh.stopped_ranks[rank] = ev.reason
                if mesh.kind == "proc":
                    self._retired.setdefault(mesh.members[rank], ev.reason)
        return []

    def _on_proc_retired(self, ev: ProcRetired) -> list[Action]:
        self._stopped_procs.setdefault(ev.addr, say.why_proc_stopped(ev.addr, ev.reason))
        return []

    def _on_rank_respawned(self, ev: RankRespawned) -> list[Action]:
        old = ev.old_addr
        if old not in self._dead and old not in self._unreachable and old not in self._lost:
            raise self._invalid(ev, f"the proc at {old} is not known to be dead; only a dead "
                                "proc is replaced")
        if ev.addr in self._hosted or ev.addr in self._dead:
            raise self._invalid(ev, f"the new address {ev.addr} is in use already")
        for uid, ranks in self._hosted.pop(old, {}).items():
            mesh = self._meshes.get(uid)
            if mesh is None or mesh.stopped is not None:
                continue
            for rank in ranks:
                if rank in mesh.stopped_ranks:
                    continue
                mesh.members[rank] = ev.addr
                mesh.ranks[rank] = _R
                mesh.why.pop(rank, None)
                mesh.failures.pop(rank, None)
                self._hosted.setdefault(ev.addr, {}).setdefault(uid, []).append(rank)
        return []

    def _on_stop_finished(self, ev: StopFinished) -> list[Action]:
        mesh = self._mesh(ev, ev.uid)
        if mesh.stopped is None:
            raise self._invalid(ev, f"mesh {ev.uid!r} was never stopped")
        why = say.why_stopped(mesh.stopped)
        self._lose(mesh, list(mesh.members), _E, why, stopped=True)
        failing = _Failing()
        for call in [c for c in self._calls.values() if c.uid == mesh.uid]:
            self._fail(failing, call, say.subject(mesh.uid, call.ranks) + " " + why, None)
        return self._fail_actions(failing, ev.cause_id)

    # -- calls -----------------------------------------------------------------------------------
    def _on_call_started(self, ev: CallStarted) -> list[Action]:
        if ev.call_id in self._calls:
            raise self._invalid(ev, f"call {ev.call_id} is already pending")
        mesh = self._meshes.get(ev.uid)
        known: Mapping[int, str] | None = mesh.members if mesh is not None else ev.addrs
        if known is None:
            raise self._invalid(ev, f"mesh {ev.uid!r} is not known here and no addrs were given")
        missing = sorted(ev.ranks - known.keys())
        if missing:
            raise self._invalid(ev, f"mesh {ev.uid!r} has no {say.ranks_text(missing)}")
        addrs = {rank: known[rank] for rank in sorted(ev.ranks)}
        name = mesh.name if mesh is not None else ev.uid
        call = _Call(ev.call_id, ev.uid, name, ev.endpoint, ev.ranks, addrs)
        reason = self._refusal(mesh, ev.uid, addrs)
        if reason is not None:
            failure = None if mesh is None else next(
                (mesh.failures[r] for r in sorted(ev.ranks) if r in mesh.failures), None)
            message = say.call_failed(name, ev.endpoint, reason)
            return [self._act(FailCalls((ev.call_id,), message, failure, cause_id=ev.cause_id),
                              call.uid, *addrs.values())]
        self._calls[call.call_id] = call
        for addr in addrs.values():
            self._waiting.setdefault(addr, {})[call.call_id] = None
        return []

    def _on_call_finished(self, ev: CallFinished) -> list[Action]:
        call = self._calls.get(ev.call_id)
        if call is not None:
            self._forget_call(call)
        return []

    # -- failures and exits ----------------------------------------------------------------------
    def _on_actor_failed(self, ev: ActorFailed) -> list[Action]:
        mesh = self._mesh(ev, ev.uid)
        if ev.rank not in mesh.members:
            raise self._invalid(ev, f"mesh {ev.uid!r} has no rank {ev.rank}")
        addr = mesh.members[ev.rank]
        stopped_why = self._stopped_why(mesh, addr, ev.rank)
        why = stopped_why or say.why_actor_failed(mesh.actor_class, ev.failure.cause)
        moved, report = self._lose(mesh, [ev.rank], _A, why, stopped=stopped_why is not None)
        if not moved:
            return []  # already failed or gone: reported at most once
        failure = None if stopped_why is not None else ev.failure
        if failure is not None:
            mesh.failures[ev.rank] = failure
        failing = _Failing()
        for call in self._calls_on(addr):
            if call.uid == mesh.uid and ev.rank in call.ranks:
                self._fail(failing, call, say.subject(mesh.uid, moved) + " " + why, failure)
        actions = self._fail_actions(failing, ev.cause_id)
        if report:
            actions.append(self._deliver(mesh, ev.failure, ev.cause_id))
        return actions

    def _on_proc_exited(self, ev: ProcExited) -> list[Action]:
        if ev.addr in self._dead:
            return []  # the same exit, heard twice
        self._dead[ev.addr] = ev.cause
        self._lost.pop(ev.addr, None)  # a running grace timer is now a no-op
        self._unreachable.pop(ev.addr, None)
        loss = _E if ev.expected else _C
        failures: dict[str, MeshFailure | None] = {}
        reports: list[tuple[_Mesh, MeshFailure]] = []
        for uid, all_ranks in self._hosted.get(ev.addr, {}).items():
            mesh = self._meshes[uid]
            stopped = [r for r in all_ranks if self._stopped_why(mesh, ev.addr, r) is not None]
            for rank in stopped:  # stopped members leave silently
                self._lose(mesh, [rank], loss, self._stopped_why(mesh, ev.addr, rank) or "",
                           stopped=True)
            ranks = [r for r in all_ranks if r not in stopped]
            if not ranks:
                failures[uid] = None
                continue
            why = say.why_proc_lost(ev.addr, ev.cause)
            moved, report = self._lose(mesh, ranks, loss, why, stopped=False)
            if moved:
                failure = self._proc_failure(uid, moved, mesh.actor_class, ev)
                mesh.failures.update(dict.fromkeys(moved, failure))
                failures[uid] = failure
                if report:
                    reports.append((mesh, failure))
        failing = _Failing()
        for call in self._calls_on(ev.addr):
            ranks = call.ranks_on(ev.addr)
            owned = self._meshes.get(call.uid)
            why = (self._stopped_why(owned, ev.addr, ranks[0]) if owned is not None else None) \
                or self._retired_why(ev.addr) or say.why_proc_lost(ev.addr, ev.cause)
            if call.uid not in failures:  # a mesh spawned elsewhere (None: it was stopped)
                failures[call.uid] = (None if self._retired_why(ev.addr) is not None
                                      else self._proc_failure(call.uid, ranks, "", ev))
            self._fail(failing, call, say.subject(call.uid, ranks) + " " + why,
                       failures[call.uid])
        actions = self._fail_actions(failing, ev.cause_id)  # calls first, then the owners
        actions += [self._deliver(mesh, failure, ev.cause_id) for mesh, failure in reports]
        return actions

    def _on_connection_lost(self, ev: ConnectionLost) -> list[Action]:
        addr = ev.addr
        if addr in self._dead or addr in self._timers or addr in self._unreachable:
            return []
        retired = self._retired_why(addr)
        if retired is not None:  # it said it was stopping: its end is no mystery to wait on
            self._lost[addr] = ev.reason  # (a respawn may replace it before its exit status)
            failing = _Failing()
            for call in self._calls_on(addr):
                self._fail(failing, call,
                           say.subject(call.uid, call.ranks_on(addr)) + " " + retired, None)
            return self._fail_actions(failing, ev.cause_id)
        self._lost[addr] = ev.reason
        self._timers.add(addr)
        return [self._act(StartGraceTimer(addr, self.grace_s, cause_id=ev.cause_id))]

    def _on_grace_expired(self, ev: GraceExpired) -> list[Action]:
        addr = ev.addr
        if addr not in self._timers:
            raise self._invalid(ev, f"no grace timer was started for {addr}")
        self._timers.discard(addr)
        if addr in self._dead:
            return []  # the exit status came first and failed the calls with its cause
        reason = self._lost.pop(addr)
        self._unreachable[addr] = reason
        why = say.why_unreachable(addr, reason, self.grace_s)
        failing = _Failing()
        for call in self._calls_on(addr):
            self._fail(failing, call, say.subject(call.uid, call.ranks_on(addr)) + " " + why,
                       None)
        return self._fail_actions(failing, ev.cause_id)

    # -- supervision outcomes --------------------------------------------------------------------
    def _on_supervise_done(self, ev: SuperviseDone) -> list[Action]:
        delivery = self._deliveries.get(ev.failure_id)
        if delivery is None or delivery.owner_uid != ev.owner_uid:
            raise self._invalid(ev, f"no failure {ev.failure_id!r} was delivered to "
                                    f"{ev.owner_uid!r}")
        del self._deliveries[ev.failure_id]
        if ev.handled and ev.error is None:
            return []
        original = delivery.failure
        if ev.error is not None:
            cause = f"__supervise__ raised {ev.error}"
        else:
            cause = f"it did not handle the failure of mesh {original.mesh_name} that it owns"
        owner = self._meshes.get(ev.owner_uid)
        failure = MeshFailure(
            mesh_name=ev.owner_uid,
            actor_class=owner.actor_class if owner is not None else "",
            cause=cause,
            traceback=ev.traceback,
            chain=[replace(original, chain=[]).report(), *original.chain],
            time=ev.time,
            kind="unhandled",
        )
        return [self._act(FailOwner(ev.owner_uid, failure, cause_id=ev.cause_id), delivery.uid)]

    def _on_hook_done(self, ev: HookDone) -> list[Action]:
        delivery = self._deliveries.get(ev.failure_id)
        if delivery is None or delivery.owner_uid is not None:
            raise self._invalid(ev, f"no failure {ev.failure_id!r} was given to the root hook")
        del self._deliveries[ev.failure_id]
        if not ev.exit_requested:
            return []
        report = delivery.failure.report()
        return [self._act(FailFast(report, 1, cause_id=ev.cause_id), delivery.uid)]

    # -- helpers ---------------------------------------------------------------------------------
    def _lose(
        self, mesh: _Mesh, ranks: Iterable[int], loss: Loss, why: str, *, stopped: bool
    ) -> tuple[list[int], bool]:
        """Apply :data:`TRANSITIONS` to ``ranks``: the ranks that moved, and whether to report."""
        moved: list[int] = []
        report = False
        for rank in ranks:
            old = mesh.ranks[rank]
            new, tell = TRANSITIONS.get((old, stopped, loss), (old, False))
            if new is not old:
                mesh.ranks[rank] = new
                mesh.why[rank] = why
                moved.append(rank)
                report = report or tell
        return moved, report

    def _deliver(self, mesh: _Mesh, failure: MeshFailure, cause_id: str) -> Action:
        """Hand ``failure`` of ``mesh`` to its owner, or to the root hook."""
        self._delivered += 1
        failure_id = f"{mesh.uid}#{self._delivered}"
        self._deliveries[failure_id] = _Delivery(mesh.owner_uid, failure, mesh.uid)
        if mesh.owner_uid is None:
            return self._act(RunRootHook(failure, failure_id, cause_id=cause_id))
        return self._act(DeliverToOwner(mesh.owner_uid, failure, failure_id, cause_id=cause_id))

    def _stopped_why(self, mesh: _Mesh, addr: str, rank: int | None = None) -> str | None:
        """Why a member (``rank``) of ``mesh`` on ``addr`` counts as stopped, or None."""
        if mesh.stopped is not None:
            return say.why_stopped(mesh.stopped)
        if rank is not None and rank in mesh.stopped_ranks:
            return say.why_ranks_stopped(mesh.stopped_ranks[rank])
        reason = self._retired.get(addr)
        return None if reason is None else say.why_proc_mesh_stopped(addr, reason)

    def _foreign_why(self, uid: str, rank: int) -> str | None:
        """Why a member of a mesh spawned elsewhere counts as stopped from here, or None."""
        stops = self._foreign_stops.get(uid)
        if stops is None:
            return None
        if _WHOLE in stops:
            return say.why_stopped(stops[_WHOLE])
        reason = stops.get(rank)
        return None if reason is None else say.why_ranks_stopped(reason)

    def _retired_why(self, addr: str) -> str | None:
        """Why the proc at ``addr`` counts as stopped on purpose, or None."""
        reason = self._retired.get(addr)
        if reason is not None:
            return say.why_proc_mesh_stopped(addr, reason)
        return self._stopped_procs.get(addr)

    def _addr_trouble(self, addr: str) -> str | None:
        """Why the proc at ``addr`` cannot answer, or None if nothing is known against it
        (a stop on purpose first: it explains the proc's end)."""
        retired = self._retired_why(addr)
        if retired is not None:
            return retired
        if addr in self._dead:
            return say.why_proc_lost(addr, self._dead[addr])
        if addr in self._unreachable:
            return say.why_unreachable(addr, self._unreachable[addr], self.grace_s)
        return None

    def _refusal(self, mesh: _Mesh | None, uid: str, addrs: Mapping[int, str]) -> str | None:
        """Why a call to ``addrs`` (rank -> proc) of mesh ``uid`` cannot be answered, or None.

        Ranks with the same reason are named together; several reasons are joined by ``"; "``.
        """
        whys: dict[str, list[int]] = {}
        for rank, addr in addrs.items():
            if mesh is not None:
                why = self._member_why(mesh, rank, addr)
            else:
                why = self._foreign_why(uid, rank)
            why = why or self._addr_trouble(addr)
            if why is not None:
                whys.setdefault(why, []).append(rank)
        if not whys:
            return None
        return "; ".join(say.subject(uid, ranks) + " " + why for why, ranks in whys.items())

    def _proc_failure(
        self, uid: str, ranks: list[int], actor_class: str, ev: ProcExited
    ) -> MeshFailure:
        """The failure record of the members ``ranks`` of ``uid`` lost with the proc."""
        return MeshFailure(mesh_name=uid, ranks=list(ranks), actor_class=actor_class,
                           host=ev.host, pid=ev.pid, cause=say.proc_lost_cause(ev.cause),
                           last_lines=list(ev.last_lines), time=ev.time,
                           kind=say.proc_failure_kind(ev.cause))

    def _calls_on(self, addr: str) -> list[_Call]:
        """The pending calls waiting on the proc at ``addr``, oldest first."""
        return [self._calls[call_id] for call_id in self._waiting.get(addr, ())]

    def _fail(
        self, failing: _Failing, call: _Call, reason: str, failure: MeshFailure | None
    ) -> None:
        """Forget ``call`` and add it to ``failing`` with its full message."""
        self._forget_call(call)
        failing.add(call, say.call_failed(call.name, call.endpoint, reason), failure)

    def _fail_actions(self, failing: _Failing, cause_id: str) -> list[Action]:
        return [self._act(FailCalls(ids, message, failure, cause_id=cause_id), *keys)
                for message, ids, failure, keys in failing]

    def _forget_call(self, call: _Call) -> None:
        del self._calls[call.call_id]
        for addr in set(call.addrs.values()):
            waiting = self._waiting[addr]
            del waiting[call.call_id]
            if not waiting:
                del self._waiting[addr]

    def _mesh(self, ev: Event, uid: str) -> _Mesh:
        mesh = self._meshes.get(uid)
        if mesh is None:
            raise self._invalid(ev, f"mesh {uid!r} was not spawned here")
        return mesh

    # -- the story -------------------------------------------------------------------------------
    def _act(self, action: Action, *keys: StoryKey) -> Action:
        """Record ``action`` in the story (mentioning ``keys`` too) and return it."""
        self._story.record(action, [*_keys_of(action), *self._addr_keys(action), *keys])
        return action

    def _addr_keys(self, item: Event | Action) -> list[StoryKey]:
        """The meshes and calls behind the proc address ``item`` names, if it names one."""
        addr = getattr(item, "addr", None)
        if addr is None:
            return []
        return [*self._hosted.get(addr, {}), *(call.uid for call in self._calls_on(addr))]

    def _keys_of_event(self, event: Event) -> list[StoryKey]:
        """What ``event`` mentions, including the mesh and procs behind a call or a failure id."""
        keys = _keys_of(event)
        if isinstance(event, (CallStarted, CallFinished)):
            call = self._calls.get(event.call_id)
            if call is not None:
                keys += [call.uid, *call.addrs.values()]
            elif isinstance(event, CallStarted) and event.uid in self._meshes:
                members = self._meshes[event.uid].members
                keys += [members[r] for r in event.ranks if r in members]
        delivery = self._deliveries.get(getattr(event, "failure_id", ""))
        if delivery is not None:
            keys.append(delivery.uid)
        return keys + self._addr_keys(event)  # a proc's fate is part of its meshes' story

    def _invalid(self, event: Event, why: str) -> InvalidTransition:
        return InvalidTransition(event, why, self._story.about(*self._keys_of_event(event)))


_KEY_FIELDS: Final = ("uid", "owner_uid", "addr", "old_addr", "failure_id", "call_id")


def _keys_of(item: Event | Action) -> list[StoryKey]:
    """The uids, addresses, failure ids and call ids named by the fields of ``item``."""
    keys: list[StoryKey] = []
    for f in fields(item):
        value: Any = getattr(item, f.name)
        if f.name in _KEY_FIELDS and value is not None:
            keys.append(value)
        elif f.name == "call_ids":
            keys.extend(value)
        elif f.name in ("members", "addrs") and value is not None:
            keys.extend(value.values())
        elif isinstance(value, MeshFailure):
            keys.append(value.mesh_name)
    return keys


_HANDLERS: Final[Mapping[type[Event], Callable[[SupervisionState, Any], list[Action]]]] = {
    MeshSpawned: SupervisionState._on_mesh_spawned,
    MeshStopped: SupervisionState._on_mesh_stopped,
    RanksStopped: SupervisionState._on_ranks_stopped,
    RankRespawned: SupervisionState._on_rank_respawned,
    StopFinished: SupervisionState._on_stop_finished,
    CallStarted: SupervisionState._on_call_started,
    CallFinished: SupervisionState._on_call_finished,
    ActorFailed: SupervisionState._on_actor_failed,
    ProcExited: SupervisionState._on_proc_exited,
    ProcRetired: SupervisionState._on_proc_retired,
    ConnectionLost: SupervisionState._on_connection_lost,
    GraceExpired: SupervisionState._on_grace_expired,
    SuperviseDone: SupervisionState._on_supervise_done,
    HookDone: SupervisionState._on_hook_done,
}
"""Which handler takes which event; every rule is in one of them or in TRANSITIONS."""

_WHOLE: Final = -1
"""The rank under which a whole foreign mesh's stop is kept in ``_foreign_stops``."""

_KEEP_VERDICTS: Final = frozenset({CallStarted, CallFinished, SuperviseDone, HookDone})
"""Events that never change a refusal: the published snapshot stays valid across them."""


def _freeze(table: dict[str, dict[int, str]]) -> Mapping[str, Mapping[int, str]]:
    return MappingProxyType({uid: MappingProxyType(whys) for uid, whys in table.items()})


@dataclass(frozen=True, slots=True)
class Verdicts:
    """What :class:`SupervisionState` refuses, as of one moment: immutable, any thread.

    Attributes:
        ranks: mesh uid -> rank -> why a new call to that member is refused.
        stopped: mesh uid -> why a new call to any member of that (stopped) mesh is refused.
        addrs: proc address -> why a new call to a member there is refused (its proc died,
            is unreachable, or its connection was just lost: new calls do not wait for the
            grace period that pending ones get).
        spawn_stopped: proc mesh uid -> rank -> why that proc was stopped (no spawn again);
            rank -1 stands for every rank (a whole mesh spawned elsewhere, stopped here).
        names: mesh uid -> display name, for the messages.
    """

    ranks: Mapping[str, Mapping[int, str]]
    stopped: Mapping[str, str]
    addrs: Mapping[str, str]
    spawn_stopped: Mapping[str, Mapping[int, str]]
    names: Mapping[str, str]

    def call_refusal(self, uid: str, members: Iterable[tuple[int, str]]) -> str | None:
        """Why a new call to ``members`` ((rank, proc address) pairs) of mesh ``uid`` must
        fail at once, or None. Ranks with the same reason are named together."""
        whole = self.stopped.get(uid)
        mine = self.ranks.get(uid, {})
        addrs = self.addrs
        whys: dict[str, list[int]] = {}
        for rank, addr in members:
            why = whole or mine.get(rank) or addrs.get(addr)
            if why is not None:
                whys.setdefault(why, []).append(rank)
        if not whys:
            return None
        return "; ".join(say.subject(uid, ranks) + " " + why for why, ranks in whys.items())

    def stopped_ranks(self, uid: str, ranks: Iterable[int]) -> list[int]:
        """Which of ``ranks`` of proc mesh ``uid`` were stopped (and so are not stopped
        again)."""
        gone = self.spawn_stopped.get(uid, {})
        if _WHOLE in gone:
            return list(ranks)
        return [rank for rank in ranks if rank in gone]

    @property
    def empty(self) -> bool:
        """Whether nothing at all is refused (a runtime then publishes ``None``)."""
        return not (self.ranks or self.stopped or self.addrs or self.spawn_stopped)

    def spawn_refusal(self, uid: str, name: str,
                      members: Iterable[tuple[int, str]]) -> tuple[str, bool] | None:
        """Why actors cannot be spawned on ``members`` of proc mesh ``uid``, and whether it
        is because the mesh (or those procs) were stopped; None when the spawn may go."""
        members = list(members)
        gone = self.spawn_stopped.get(uid, {})
        stopped = gone.get(_WHOLE) or next((gone[r] for r, _ in members if r in gone), None)
        if stopped is not None:
            return ("`ProcMesh` has already been stopped. "  # Monarch's words, then ours
                    f"Cannot spawn new actors on proc mesh {name!r} ({uid}): it was stopped "
                    f"({stopped}) and cannot be used again.", True)
        bad = {rank: why for rank, addr in members if (why := self.addrs.get(addr)) is not None}
        return (say.spawn_refused(uid, name, bad), False) if bad else None
