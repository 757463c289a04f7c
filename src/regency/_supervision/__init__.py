"""The pure supervision core: who hears about a failure, and which calls fail with it.

:class:`SupervisionState` holds the rules for one runtime as a state machine: the runtime
feeds it events (facts: a mesh spawned, a call started, an actor failed, a proc exited, a
connection broke, a timer ran out, ``__supervise__`` returned) and executes the actions it
returns (fail these calls, start a timer, deliver a failure to its owner, run the root hook,
fail the owner, fail fast). Each event and action carries a cause id and goes into a bounded
story. Nothing here does I/O, reads a clock, or imports asyncio, socket, threading, subprocess
or selectors (a unit test checks it). The rules are written out in :mod:`._state`.
"""

from __future__ import annotations

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
from regency._supervision._state import (
    DEFAULT_GRACE_S,
    TRANSITIONS,
    InvalidTransition,
    Loss,
    RankState,
    SupervisionState,
    SupervisionStatistics,
    Verdicts,
)
from regency._supervision._story import StoryEntry, StoryKey

__all__ = [
    "DEFAULT_GRACE_S",
    "TRANSITIONS",
    "Action",
    "ActorFailed",
    "CallFinished",
    "CallStarted",
    "ConnectionLost",
    "DeliverToOwner",
    "Event",
    "FailCalls",
    "FailFast",
    "FailOwner",
    "GraceExpired",
    "HookDone",
    "InvalidTransition",
    "Loss",
    "MeshKind",
    "MeshSpawned",
    "MeshStopped",
    "ProcExited",
    "ProcRetired",
    "RankRespawned",
    "RanksStopped",
    "RankState",
    "RunRootHook",
    "StartGraceTimer",
    "StopFinished",
    "StoryEntry",
    "StoryKey",
    "SupervisionState",
    "SupervisionStatistics",
    "SuperviseDone",
    "Verdicts",
]
