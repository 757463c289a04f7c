"""Every kind of message regency sends, one small typed class each.

A frame is ``[header, *payload]`` (see :mod:`._frames`). The *header* is one of three
envelope kinds, encoded by :mod:`._envelope` and decoded once per process:

``Call``    a message for an actor (or, with a ``sys:`` endpoint, a system message that
            travels a relay tree behind the calls before it). ``frame[1]`` is the pickled
            ``(args, kwargs)``, ``frame[2:]`` its out-of-band buffers. One header, encoded
            once, goes to every member of a cast: ``cast`` is the slice it was sent to, and
            each member computes its own message rank from it.
``Reply``   a value (or an error, see the status codes) for the port ``port_id`` of the
            receiver; ``frame[1:]`` is the pickled value.
``System``  a system message of kind ``kind``; ``frame[1:]`` is the pickled message object,
            an instance of the :class:`SystemMessage` subclass registered for that kind.

System messages (spawn a proc, an actor failed, a heartbeat, ...) are typed too: each kind is
a dataclass registered in :data:`SYSTEM_KINDS` by :func:`system_message`, and a runtime routes
it to the one handler registered for its class (``Runtime.handle``). To add a kind: write the
class here under ``@system_message("name")`` and ``@dataclass(slots=True)``, register its
handler where the layer that owns it starts, and send it with
``Runtime.send_sys(addr, TheKind(...))`` (ADR 0011).

This module is pure: field types from the layers above are named in comments only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from ._headers import (
    ACTOR_ERROR,
    CALL_TAG,
    EOS,
    HEADER_KINDS,
    OK,
    RAW_ERROR,
    REPLY_TAG,
    SUPERVISION,
    SYSTEM_ENDPOINT,
    SYSTEM_TAG,
    Call,
    Cast,
    Header,
    PortRef,
    Reply,
    System,
)

__all__ = [
    "ACTOR_ERROR",
    "CALL_TAG",
    "EOS",
    "HEADER_KINDS",
    "OK",
    "RAW_ERROR",
    "REPLY_TAG",
    "SUPERVISION",
    "SYSTEM_ENDPOINT",
    "SYSTEM_TAG",
    "SYSTEM_KINDS",
    "ActorFailed",
    "Adopt",
    "AskTopology",
    "Attach",
    "Call",
    "Cast",
    "Fault",
    "GetOrSpawnController",
    "Header",
    "Heartbeat",
    "KeepProcs",
    "ListKept",
    "OutputMark",
    "PortRef",
    "ProcExited",
    "ProcOutput",
    "ProcReady",
    "ProcUp",
    "RdmaDrop",
    "RdmaTaken",
    "Reattach",
    "Release",
    "Reply",
    "Resolve",
    "SpawnActor",
    "SpawnProcs",
    "StopActor",
    "StopProc",
    "StopProcs",
    "System",
    "SystemMessage",
    "system_message",
]

# -- system messages -----------------------------------------------------------------------------
class SystemMessage:
    """Base of the typed system messages; ``KIND`` names it on the wire."""

    __slots__ = ()
    KIND: ClassVar[str] = ""
    _fields: ClassVar[tuple[str, ...]] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), tuple(getattr(self, f) for f in self._fields))


SYSTEM_KINDS: dict[str, type[SystemMessage]] = {}
"""The one registry of system-message kinds: kind name -> class."""

S = TypeVar("S", bound=SystemMessage)


def system_message(kind: str) -> Callable[[type[S]], type[S]]:
    """Class decorator (above ``@dataclass(slots=True)``): register the class as ``kind``."""

    def register(cls: type[S]) -> type[S]:
        if kind in SYSTEM_KINDS:
            raise ValueError(f"system-message kind {kind!r} is registered twice")
        cls.KIND = kind
        cls._fields = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
        SYSTEM_KINDS[kind] = cls
        return cls

    return register


@system_message("spawn_procs")
@dataclass(slots=True)
class SpawnProcs(SystemMessage):
    """To a host agent: start these procs (``procs``: ``{"addr", "rank", "label"}`` each)."""

    procs: list[dict[str, Any]]
    spec: dict[str, Any]  # the proc spec shared by all of them (see ``run_proc``)
    owner: str  # who hears of their start and exit
    mesh_uid: str
    env: dict[str, str] | None = None  # None: the agent's own environment
    cwd: str | None = None
    sys_path: list[str] | None = None


@system_message("proc_ready")
@dataclass(slots=True)
class ProcReady(SystemMessage):
    """From a new proc to its host agent: it listens (or its bootstrap failed)."""

    addr: str
    pid: int
    error: str | None
    physical: str  # where it really listens (its ``addr`` may be a ``via:`` name)


@system_message("proc_up")
@dataclass(slots=True)
class ProcUp(SystemMessage):
    """From a host agent to a proc's owner: the proc is ready (or failed to start)."""

    addr: str
    pid: int
    mesh_uid: str
    error: str | None


@system_message("proc_exited")
@dataclass(slots=True)
class ProcExited(SystemMessage):
    """From a host agent to a proc's owner: the proc ended."""

    addr: str
    pid: int | None
    cause: str
    expected: bool
    mesh_uid: str
    rank: int
    host: str
    last_lines: list[str]
    endpoint: str | None = None  # the endpoint in flight when it died, if known


@system_message("proc_output")
@dataclass(slots=True)
class ProcOutput(SystemMessage):
    """From a worker's host agent to its controller: lines one of its procs printed."""

    label: str
    stream: str  # "stdout" or "stderr"
    lines: list[str]
    proc: str = ""  # the address of the proc that printed them (for the event store)
    read: int = -1  # bytes read from that pipe so far, these lines' included (-1: not said)


@system_message("output_mark")
@dataclass(slots=True)
class OutputMark(SystemMessage):
    """From a worker's proc, just before a reply or system message: ``(proc, stdout bytes,
    stderr bytes)`` it had written to its pipes, with the marks of procs it called that it
    passes on. The controller lets a reply be seen once each proc's agent has said in
    ``proc_output`` that it read as many; a proc passes the marks on to the controller."""

    marks: list[tuple[str, int, int]]


@system_message("stop_procs")
@dataclass(slots=True)
class StopProcs(SystemMessage):
    """To a host agent: stop these procs (kill them after the stop timeouts)."""

    addrs: list[str]
    reason: str
    port: PortRef | None  # answered once they are gone


@system_message("stop_proc")
@dataclass(slots=True)
class StopProc(SystemMessage):
    """From a host agent to one of its procs: stop its actors and exit."""

    reason: str


@system_message("proc_retiring")
@dataclass(slots=True)
class ProcRetiring(SystemMessage):
    """From a proc being stopped on purpose to every peer it talks to: calls to it from now
    on fail naming ``reason``, and its end is no failure (a peer may not own it)."""

    addr: str
    reason: str


@system_message("resolve")
@dataclass(slots=True)
class Resolve(SystemMessage):
    """To a host agent: where does the proc known as ``name`` (a ``via:`` name) listen?"""

    name: str
    port: PortRef


@system_message("spawn_actor")
@dataclass(slots=True)
class SpawnActor(SystemMessage):
    """To every proc of a mesh: construct one actor of a class here."""

    uid: str
    name: str
    body: bytes  # the pickled (class, args, kwargs), unpickled by the proc
    class_name: str
    fanout: int
    shape: Any  # regency._mesh.Shape: the proc mesh's slice
    proc_addrs: tuple[str, ...]
    owner: str
    owner_uid: str | None
    creator: Any  # regency._api._context.Instance of the spawning actor
    ack: PortRef
    proc_mesh: Any  # regency._api._proc_mesh.ProcMesh


@system_message("stop_actor")
@dataclass(slots=True)
class StopActor(SystemMessage):
    """To a proc: stop the actor of mesh ``uid`` here (``__cleanup__`` runs)."""

    uid: str
    reason: str
    port: PortRef | None


@system_message("actor_failed")
@dataclass(slots=True)
class ActorFailed(SystemMessage):
    """From a proc to an actor's owner: the member at global rank ``rank`` failed."""

    uid: str
    rank: int
    failure: Any  # regency.errors.MeshFailure
    owner_uid: str | None


@system_message("get_or_spawn_controller")
@dataclass(slots=True)
class GetOrSpawnController(SystemMessage):
    """To the root client: the singleton actor mesh ``name`` (spawned on first use)."""

    name: str
    cls: type
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    port: PortRef


@system_message("fault")
@dataclass(slots=True)
class Fault(SystemMessage):
    """From ``regency.testing`` to a proc: raise a signal, or alter the next calls.

    ``action`` is ``signal`` (``signal``), ``raise`` (``exc``), ``delay`` (``seconds``) or
    ``drop``; the last three apply to the next ``times`` calls of ``endpoint`` of ``uid``.
    """

    action: str
    signal: int = 0
    uid: str = ""
    endpoint: str = ""
    times: int = 0
    exc: BaseException | None = None
    seconds: float = 0.0


@system_message("attach")
@dataclass(slots=True)
class Attach(SystemMessage):
    """From a controller to a worker: serve me, with this lease (seconds)."""

    port: PortRef
    controller: str
    lease: float


@system_message("heartbeat")
@dataclass(slots=True)
class Heartbeat(SystemMessage):
    """From a controller to a worker it attached: renew the lease."""

    port: PortRef
    controller: str


@system_message("release")
@dataclass(slots=True)
class Release(SystemMessage):
    """From a controller to a worker: kill my procs and detach (and exit, with ``exit``)."""

    port: PortRef
    controller: str
    exit: bool = False


@system_message("ask_topology")
@dataclass(slots=True)
class AskTopology(SystemMessage):
    """To a host agent: describe this host (its CPUs, NUMA nodes, GPUs and labels)."""

    port: PortRef


@system_message("keep_procs")
@dataclass(slots=True)
class KeepProcs(SystemMessage):
    """From a controller to a worker: the procs ``addrs`` of mesh ``mesh_uid`` outlive me
    (``ProcMesh.detach``); ``parts`` (opaque here, merged with those sent before) are what a
    later controller needs to adopt the mesh, handed back by ``ListKept``; an empty part is
    dropped. No ``addrs``: keep nothing of it (its controller stopped it)."""

    port: PortRef
    controller: str
    mesh_uid: str
    name: str
    addrs: list[str]
    parts: dict[str, bytes]


@system_message("list_kept")
@dataclass(slots=True)
class ListKept(SystemMessage):
    """From a controller to a worker: the proc meshes kept there for a later controller."""

    port: PortRef
    controller: str


@system_message("reattach")
@dataclass(slots=True)
class Reattach(SystemMessage):
    """From a controller to a worker: the kept mesh ``mesh_uid`` is mine now (it is no longer
    kept: it ends with me unless I detach it again)."""

    port: PortRef
    controller: str
    mesh_uid: str


@system_message("adopt")
@dataclass(slots=True)
class Adopt(SystemMessage):
    """From a controller to a proc of a mesh it reattached: I am your root and the owner of
    the actor meshes that ``old`` (the earlier controller's addresses) owned here."""

    port: PortRef
    owner: str
    root: str
    root_addresses: list[str]
    old: list[str]


@system_message("rdma_drop")
@dataclass(slots=True)
class RdmaDrop(SystemMessage):
    """To the owner of an ``RDMABuffer``: release registration ``reg_id``."""

    reg_id: int
    key: int
    port: PortRef


@system_message("rdma_taken")
@dataclass(slots=True)
class RdmaTaken(SystemMessage):
    """To the lender of a CUDA tensor: one receiver took its copy of lend ``reg_id``."""

    reg_id: int
    key: int
