"""``context()``: who is running (which actor, which rank) and for which message."""

from __future__ import annotations

import contextvars
import importlib
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._mesh import Extent, Point
from ._process import runtime
from ._state import api_state

if TYPE_CHECKING:  # annotations only: meshes sit above contexts
    from ._proc_mesh import ProcMesh

__all__ = [
    "Context", "Instance", "context", "current_actor_name", "current_rank", "current_size",
    "root_context",
]

_EMPTY = Extent([], [])


@dataclass(eq=False)
class Instance:
    """The running actor (or the root client): ids, rank, proc, creator, ``stop()``.

    Attributes:
        actor_id: unique id text (``name-uid[rank]@address``).
        name: the name given at spawn (``"root"`` on the client).
        class_name: ``module.QualName`` of the actor class.
        rank: position in the mesh the actor was spawned on.
        creator: the instance that spawned this one's mesh (``None`` for the root).
        proc_id: id of the proc it runs on.

    Whoever makes an instance (the actor host, the top layer for the root) gives it its
    proc meshes; a copy sent to another process (``creator``) keeps them.
    """

    actor_id: str
    name: str
    class_name: str
    rank: Point
    proc_id: str
    creator: Instance | None = None
    mesh_uid: str = ""
    _proc_mesh: ProcMesh | None = field(default=None, repr=False)
    _stop: Any = field(default=None, repr=False)
    _abort: Any = field(default=None, repr=False)
    _proc: ProcMesh | None = field(default=None, repr=False)
    is_system: bool = field(default=False, repr=False)

    @property
    def proc_mesh(self) -> ProcMesh:
        """The whole proc mesh this actor was spawned on."""
        mesh = self._proc_mesh if self._proc_mesh is not None else self._proc
        if mesh is None:
            raise RuntimeError(f"{self!r} knows no proc mesh")
        return mesh

    @property
    def proc(self) -> ProcMesh:
        """A 0-dimensional proc mesh of this actor's own proc."""
        if self._proc is None:
            raise RuntimeError(f"{self!r} knows no proc")
        return self._proc

    def spawn_tensor_engine(self, proc_mesh: ProcMesh) -> Any:
        """The tensor engine of ``proc_mesh`` (its device mesh; workers spawned the first
        time). ``proc_mesh.activate()`` is the usual way in; needs torch."""
        return importlib.import_module("regency._tensor.api").device_mesh_of(proc_mesh)

    def stop(self, reason: str = "stopped by the actor itself") -> None:
        """Stop this actor (this rank only) after the current message."""
        if self._stop is None:
            raise RuntimeError("the root client cannot be stopped this way; use shutdown_context()")
        self._stop(reason)

    def abort(self, reason: str | None = None) -> None:
        """Fail this actor (this rank) on purpose, as Monarch's ``abort``.

        The message in hand still completes (its caller gets its answer); then the actor is
        failed: ``__cleanup__`` runs with the failure, later calls raise ``SupervisionError``
        (``actor explicitly aborted due to: <reason>``), and its owner's ``__supervise__``
        gets the ``MeshFailure``.
        """
        if self._abort is None:
            raise RuntimeError("the root client cannot abort itself; raise an exception, or "
                               "call sys.exit()")
        self._abort(reason)

    def kill(self, reason: str | None = None) -> None:
        """Terminate this actor with a failure: the same as :meth:`abort`."""
        self.abort(reason)

    def set_system(self) -> None:
        """Mark this actor as part of the infrastructure, not the user's program (Monarch
        hides such actors from its admin views; here it sets ``is_system``)."""
        self.is_system = True

    def __repr__(self) -> str:
        if self.creator is None and self.name == "root" and not self.class_name:
            return "<root>"
        own = f"<{self.class_name} {self.name}{self.rank!r}>"
        return f"{self.creator!r}.{own}" if self.creator is not None else own


@dataclass(eq=False)
class Context:
    """What ``context()`` returns: the running actor and the rank of the current message."""

    actor_instance: Instance
    message_rank: Point

    #: When the call being handled must be answered by (``time.monotonic()``), 0.0 for no
    #: deadline (``deadline()``); the calls the endpoint sends inherit it.
    expires = 0.0

    def time_remaining(self) -> float | None:
        """Seconds left before the deadline that calls sent from here now would carry (0.0
        once past), or None when there is none: that of the call being handled, or of the
        ``regency.actor.deadline`` block around this code (not in Monarch). An endpoint that
        works in steps can stop in time; its caller's future fails at the deadline."""
        expires = expiry_for(self)
        return max(0.0, expires - time.monotonic()) if expires else None

    @property
    def cancelled(self) -> bool:
        """Whether the caller cancelled the call being handled (``Future.cancel()``; not in
        Monarch). A sync endpoint cannot be interrupted: one that runs long can look, and
        return early. False outside an endpoint."""
        return False

    def __repr__(self) -> str:
        return f"Context({self.actor_instance!r}, message_rank={self.message_rank!r})"


_current: contextvars.ContextVar[Context] = contextvars.ContextVar("regency_context")

#: When the calls sent now must be answered by (``time.monotonic()``), as the ``deadline()``
#: blocks around the code say (``_deadlines``): 0.0 where no block does (the call being
#: handled may: its context's ``expires``), ``inf`` in ``deadline(None)``, no deadline even
#: where the call being handled has one.
deadline_scope: contextvars.ContextVar[float] = contextvars.ContextVar("regency_deadline",
                                                                       default=0.0)


def expiry_for(ctx: Context | None) -> float:
    """When the calls sent now from ``ctx`` must be answered by (``time.monotonic()``), or
    0.0 for no deadline: the ``deadline()`` blocks around the code, else the call ``ctx``
    handles. (``Endpoint._send`` inlines it: the hot path.)"""
    scoped = deadline_scope.get()
    if scoped:
        return 0.0 if scoped == math.inf else scoped
    return ctx.expires if ctx is not None else 0.0


def context() -> Context:
    """The current context: inside an actor, that actor; elsewhere the root client."""
    try:
        return _current.get()
    except LookupError:
        return root_context()


def root_context() -> Context:
    """The context of the root client (outside any actor), starting the runtime if needed."""
    ctx = api_state(runtime()).root_context
    if ctx is None:
        raise RuntimeError("this process's runtime has no root context")
    return ctx


def current_rank() -> Point:
    """The rank of the current message within the slice it was sent to."""
    return context().message_rank


def current_size() -> dict[str, int]:
    """The sizes of the slice the current message was sent to."""
    return dict(context().message_rank.extent)


def current_actor_name() -> str:
    """The id text of the current actor."""
    return context().actor_instance.actor_id


def set_context(ctx: Context) -> contextvars.Token[Context]:
    """Make ``ctx`` current in this thread or task."""
    return _current.set(ctx)


def empty_point() -> Point:
    """The only point of a 0-dimensional extent."""
    return Point(0, _EMPTY)
