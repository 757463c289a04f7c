"""Events: the facts a runtime feeds to :class:`~regency._supervision.SupervisionState`.

Events are named in the past tense; each states something that already happened and carries a
``cause_id`` (keyword-only), the id of the stimulus that led to it (dask's ``stimulus_id``).
Every action the state machine returns for an event carries the same ``cause_id``, and both
are kept in the machine's story, so a report can be traced back to what caused it.

Events are frozen and slotted. Container fields are copied into immutable containers on
construction, so an event cannot change after it has been handled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from regency.errors import MeshFailure

__all__ = [
    "ActorFailed",
    "CallFinished",
    "CallStarted",
    "ConnectionLost",
    "Event",
    "GraceExpired",
    "HookDone",
    "MeshKind",
    "MeshSpawned",
    "MeshStopped",
    "ProcExited",
    "ProcRetired",
    "RanksStopped",
    "RankRespawned",
    "StopFinished",
    "SuperviseDone",
]

MeshKind = Literal["actor", "proc"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base class of the events: something that happened, and the id of what caused it."""

    cause_id: str


# -- meshes --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MeshSpawned(Event):
    """This runtime spawned a mesh, and so owns it.

    Attributes:
        uid: the mesh's unique id (also ``MeshFailure.mesh_name`` of its failures).
        owner_uid: uid of the actor mesh whose actor spawned it, in this process; ``None`` for
            the root client of the controller.
        kind: ``"actor"`` or ``"proc"``.
        name: the display name the user gave it.
        members: rank -> address of the proc hosting that member.
        actor_class: qualified class name of the actors (actor meshes only).
    """

    uid: str
    owner_uid: str | None
    kind: MeshKind
    name: str
    members: Mapping[int, str]
    actor_class: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", MappingProxyType(dict(self.members)))


@dataclass(frozen=True, slots=True)
class MeshStopped(Event):
    """The mesh is being stopped on purpose: nothing about it is reported as a failure again.

    New calls to it are refused at once; calls already pending fail when its procs go away
    (:class:`ProcExited`) or when the stop has finished (:class:`StopFinished`). Stopping a
    proc mesh also stops, in this sense, every owned mesh whose members live on its procs.
    """

    uid: str
    reason: str


@dataclass(frozen=True, slots=True)
class ProcRetired(Event):
    """The proc at ``addr`` says it is being stopped on purpose (by its owner, a controller
    or its worker), wherever its meshes were spawned: its members leave without a failure.

    New calls to it are refused at once, naming ``reason``; calls already pending may still
    be answered, and fail with ``reason`` when its connection ends (no grace period) or its
    exit is heard.
    """

    addr: str
    reason: str


@dataclass(frozen=True, slots=True)
class RanksStopped(Event):
    """Some members of a mesh (a slice, or some procs of a proc mesh) are being stopped on
    purpose: as :class:`MeshStopped`, for those ranks only.

    New calls to them are refused at once; calls already pending may still be answered and
    fail when their procs go away; a later loss of those ranks is never reported. Stopping
    procs of a proc mesh also stops the owned members that live on them.
    """

    uid: str
    ranks: frozenset[int]
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranks", frozenset(self.ranks))


@dataclass(frozen=True, slots=True)
class RankRespawned(Event):
    """The dead proc at ``old_addr`` was replaced by a new proc at ``addr`` (an elastic
    mesh's respawn): every member the old proc hosted, of meshes not stopped, now lives at
    ``addr`` and is RUNNING again. The old address stays dead (addresses are never reused).
    """

    old_addr: str
    addr: str


@dataclass(frozen=True, slots=True)
class StopFinished(Event):
    """Every member of a stopped mesh is gone; calls still pending on it can never be answered."""

    uid: str


# -- calls ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CallStarted(Event):
    """A call now waits for replies from ``ranks`` of mesh ``uid``.

    Attributes:
        call_id: the runtime's id of the call, unique among pending calls.
        uid: the called mesh.
        ranks: the ranks it waits on (a slice may exclude some ranks of the mesh).
        endpoint: the endpoint's name, for messages.
        addrs: rank -> proc address of the called ranks. Needed only for a mesh this runtime
            did not spawn (a reference that arrived in a message); ignored for owned meshes,
            whose members are known.
    """

    call_id: int
    uid: str
    ranks: frozenset[int]
    endpoint: str
    addrs: Mapping[int, str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranks", frozenset(self.ranks))
        if self.addrs is not None:
            object.__setattr__(self, "addrs", MappingProxyType(dict(self.addrs)))


@dataclass(frozen=True, slots=True)
class CallFinished(Event):
    """All replies of the call arrived, or it failed by itself (an endpoint raised, a timeout).

    Finishing a call the machine has already failed is harmless: the two may cross.
    """

    call_id: int


# -- failures and exits --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ActorFailed(Event):
    """An actor of an owned mesh reported its own failure (its exception, or an unhandled one)."""

    uid: str
    rank: int
    failure: MeshFailure


@dataclass(frozen=True, slots=True)
class ProcExited(Event):
    """The host agent reaped a proc: the fact of its death, with the exit status.

    Attributes:
        addr: the proc's address.
        cause: what happened, completing "the proc ...", e.g. ``"was killed by signal 9
            (SIGKILL)"`` or ``"exited with code 3"``.
        expected: the proc was asked to exit (a stop), so its exit is not a failure.
        pid: its process id, if known.
        host: its host name.
        last_lines: the last lines it printed.
        time: when it exited (seconds since the epoch); copied into the failure record, as the
            state machine reads no clock.
    """

    addr: str
    cause: str
    expected: bool
    pid: int | None
    host: str
    last_lines: tuple[str, ...] = ()
    time: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "last_lines", tuple(self.last_lines))


@dataclass(frozen=True, slots=True)
class ConnectionLost(Event):
    """The connection to a proc broke: a hint that it died; the exit status may follow."""

    addr: str
    reason: str


@dataclass(frozen=True, slots=True)
class GraceExpired(Event):
    """The grace timer started for a :class:`ConnectionLost` of ``addr`` ran out."""

    addr: str


# -- supervision outcomes ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SuperviseDone(Event):
    """The owner actor's ``__supervise__`` returned (or raised, or does not exist).

    Attributes:
        owner_uid: the owner actor mesh it ran in.
        failure_id: the id from the :class:`~regency._supervision.DeliverToOwner` it answers.
        handled: what it returned, as a bool (``False`` when there is no ``__supervise__``).
        error: the exception it raised, as one line (``"ValueError: boom"``), else ``None``.
            An error means the failure was not handled, whatever ``handled`` says.
        traceback: the traceback of ``error``, if any.
        time: when it returned; copied into the owner's failure record.
    """

    owner_uid: str
    failure_id: str
    handled: bool
    error: str | None = None
    traceback: str = ""
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class HookDone(Event):
    """The root's ``unhandled_fault_hook`` ran for a failure.

    ``exit_requested`` is true when the hook raised (``SystemExit`` included): the program must
    fail fast. When it returned, the user chose to carry on.
    """

    failure_id: str
    exit_requested: bool
