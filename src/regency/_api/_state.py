"""What the API layer keeps per runtime, as one typed object (``Runtime.api``).

The runtime knows nothing of meshes or supervision; the API layer hangs its books here:
the supervisor, the state shared by a mesh and its slices, the proc meshes and actor meshes
this process owns, the root context, the singleton
controllers (at the root) and the workers it keeps alive with heartbeats.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._mesh import Shape
from .._runtime._completion import Completion
from .._runtime._runtime import Runtime
from ._supervisor import Supervisor

if TYPE_CHECKING:  # annotations only: the context layer sits above this one
    from ._context import Context

__all__ = ["ApiState", "MeshState", "OwnedMesh", "ProcMeshRecord", "api_state", "supervisor"]


class MeshState:
    """State shared by a mesh and its slices in this process (never pickled)."""

    def __init__(self, n: int) -> None:
        self.ready = Completion("the mesh to start")
        self.waiting = n
        # proc meshes: asked to stop as a whole (shutdown does not ask again); supervision,
        # not this, decides what is refused
        self.stopped: str | None = None
        if n == 0:
            self.ready.set_result(True)


@dataclass(eq=False)
class ProcMeshRecord:
    """A proc mesh this process spawned (and owns)."""

    state: MeshState
    addr_list: list[str]  # by rank
    agents: list[str]  # the host agent of each rank
    owner_uid: str | None  # the actor mesh that spawned it (None: the client)
    name: str
    shape: Shape
    spec: dict[str, Any] | None = None  # the proc spec, to respawn a rank
    entries: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> what its
    # spawn request had of its own (a bootstrap command, a proc_bind), to respawn it
    incarnations: dict[int, int] = field(default_factory=dict)  # rank -> respawns so far
    detached: bool = False  # kept by its workers when this controller ends (``_reattach``)


@dataclass(eq=False)
class OwnedMesh:
    """An actor mesh this process spawned: stopped with its owner."""

    uid: str
    class_name: str
    shape: Shape
    proc_addrs: tuple[str, ...]
    owner_uid: str | None
    cls: Any = None  # the actor class (``ProcMesh.actor_meshes`` makes meshes of it)


@dataclass(eq=False)
class ApiState:
    """The API layer's books in one runtime."""

    supervisor: Supervisor | None = None  # set by ``_dispatch.install``
    root_context: Context | None = None  # set by whoever starts the runtime (top layer)
    mesh_state: dict[str, MeshState] = field(default_factory=dict)  # mesh uid -> state
    proc_meshes: dict[str, ProcMeshRecord] = field(default_factory=dict)
    owned: dict[str, OwnedMesh] = field(default_factory=dict)  # actor meshes spawned here
    spawned: dict[str, Any] = field(default_factory=dict)  # actor mesh uid -> its SpawnActor
    controllers: dict[str, Any] = field(default_factory=dict)  # name -> ActorMesh (root)
    heartbeats: dict[str, float] = field(default_factory=dict)  # worker -> last answer
    worker_pids: dict[str, tuple[str, int]] = field(default_factory=dict)  # -> (host, pid)
    heartbeat_task: asyncio.Task[None] | None = None
    heartbeat_started: bool = False
    this_proc: Any = None  # the ProcMesh this_proc() returns (the same each time)
    # host agent -> {port: its handler}: requests whose answer a lost host never gives
    # (``_mesh_state.agent_port``), answered by ``host_lost`` instead
    asked_agents: dict[str, dict[int, Any]] = field(default_factory=dict)
    # ProcMesh.stop() completions not done yet: shutdown waits for them (an unawaited stop
    # at the end of a script still runs its actors' __cleanup__)
    stops_in_flight: set[Any] = field(default_factory=set)
    # record parts of detached meshes sent to their workers, not answered yet (``_reattach``)
    kept_sends: set[Any] = field(default_factory=set)


def api_state(rt: Runtime) -> ApiState:
    """The API layer's state in ``rt`` (made on first use)."""
    state = rt.api
    if state is None:
        state = rt.api = ApiState()
    assert isinstance(state, ApiState)
    return state


def supervisor(rt: Runtime) -> Supervisor:
    """The supervisor of ``rt`` (installed with the handlers)."""
    sup = api_state(rt).supervisor
    assert sup is not None, "the API layer's handlers are installed with the runtime"
    return sup
