"""Actions: what :class:`~regency._supervision.SupervisionState` tells its runtime to do.

Actions are imperatives. The runtime executes them in the order given and feeds what comes of
them back as events (a timer's expiry, the result of ``__supervise__``). Each carries the
``cause_id`` of the event that produced it.
"""

from __future__ import annotations

from dataclasses import dataclass

from regency.errors import MeshFailure

__all__ = [
    "Action",
    "DeliverToOwner",
    "FailCalls",
    "FailFast",
    "FailOwner",
    "RunRootHook",
    "StartGraceTimer",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """Base class of the actions: something to do, and the id of the event that caused it."""

    cause_id: str


@dataclass(frozen=True, slots=True)
class FailCalls(Action):
    """Fail these pending calls now: raise ``SupervisionError(message, failure)`` in each.

    ``failure`` is the record of what failed, when one exists (it does not for a lost
    connection, or for a mesh that was stopped).
    """

    call_ids: tuple[int, ...]
    message: str
    failure: MeshFailure | None


@dataclass(frozen=True, slots=True)
class StartGraceTimer(Action):
    """Wait ``seconds`` for the exit status of ``addr``, then feed back ``GraceExpired(addr)``."""

    addr: str
    seconds: float


@dataclass(frozen=True, slots=True)
class DeliverToOwner(Action):
    """Run ``__supervise__(failure)`` of the owner actor; answer with ``SuperviseDone``."""

    owner_uid: str
    failure: MeshFailure
    failure_id: str


@dataclass(frozen=True, slots=True)
class RunRootHook(Action):
    """The failure reached the root client: run ``unhandled_fault_hook``; answer ``HookDone``."""

    failure: MeshFailure
    failure_id: str


@dataclass(frozen=True, slots=True)
class FailOwner(Action):
    """The owner actor did not handle a failure, so it fails itself.

    ``failure`` is the owner's own failure: ``mesh_name`` is ``owner_uid`` and ``chain`` starts
    with the report of the failure it did not handle. The runtime fills in what only it knows
    (the owner's ranks, coords, host and pid), marks the owner failed, and reports this failure
    to the owner's owner, in whatever process that lives.
    """

    owner_uid: str
    failure: MeshFailure


@dataclass(frozen=True, slots=True)
class FailFast(Action):
    """Print ``report``, stop everything and exit with ``exit_code``: an unhandled failure."""

    report: str
    exit_code: int
