"""``ActorMesh``: one actor per proc, with an ``Endpoint`` per endpoint of the class."""


from __future__ import annotations

import inspect
from typing import Any, NoReturn

from .. import config
from .._mesh import MeshTrait, Shape
from .._runtime import _current
from .._runtime._completion import Completion
from .._runtime._pickling import dumps
from .._runtime._relay import Tree
from .._wire._messages import SYSTEM_ENDPOINT, StopActor
from . import _incarnation, _reattach
from ._actor import Actor, EndpointProperty, NotAnEndpoint, endpoints_of, is_async_actor
from ._endpoint import Endpoint, post_call
from ._future import Future, completed
from ._mailbox import limit_of
from ._mesh_state import members_port
from ._process import runtime
from ._route import Route, tree_for
from ._state import api_state, supervisor

__all__ = ["ActorMesh"]


class ActorMesh(MeshTrait):
    """A mesh of actors of one class, one per proc of the mesh it was spawned on.

    Each endpoint of the class is an attribute carrying the adverbs (``call``, ``call_one``,
    ``choose``, ``stream``, ``broadcast``). Picklable: pass it to other actors freely.
    """

    def __init__(self, uid: str, name: str, cls: type, shape: Shape,
                 proc_addrs: tuple[str, ...], full_shape: Shape | None = None,
                 fanout: int = 0, tree: Tree | None = None) -> None:
        self._uid = uid
        self._mesh_name = name
        self._cls = cls
        self._class_name = f"{cls.__module__}.{cls.__qualname__}"
        self._shape_ = shape
        self._addrs_made = proc_addrs
        self._full_shape = full_shape or shape
        self._fanout = fanout or int(config.get("max_cast_fanout"))
        self._tree = tree or tree_for(self._full_shape, proc_addrs, self._fanout)
        self._generation = _incarnation.generation
        self._install_endpoints()

    __iter__ = None  # not iterable (``__getitem__`` below would make it so): as in Monarch

    def __getitem__(self, key: Any) -> NoReturn:
        """Not an indexed collection (as in Monarch): explains how to select members."""
        labels = list(self._shape_.labels)
        example = f"{labels[0]}={key!r}" if labels and isinstance(key, int) else "gpus=0"
        raise TypeError(f"'ActorMesh' object is not subscriptable: select members with "
                        f"mesh.slice({example}) (its dimensions: {labels}), and call them "
                        "with an endpoint's call_one() or call()")

    @property
    def _proc_addrs(self) -> tuple[str, ...]:
        """The address of each proc, by global rank (respawned ranks at their new proc)."""
        return _incarnation.current(self._addrs_made)

    def _check_generation(self) -> None:
        """Forget routes made before a rank of some mesh was respawned."""
        if self._generation != _incarnation.generation:
            self._generation = _incarnation.generation
            self.__dict__.pop("_route_", None)
            self.__dict__.pop("_members_", None)
            self._tree = tree_for(self._full_shape, self._proc_addrs, self._fanout)

    @property
    def _route(self) -> Route:
        """Where a message to this (sliced) mesh goes; computed once per mesh object."""
        route = self.__dict__.get("_route_")
        if route is None or self._generation != _incarnation.generation:
            self._check_generation()
            route = self.__dict__["_route_"] = Route(self._shape_, self._proc_addrs, self._tree)
        return route

    def _member_route(self, local: int) -> Route:
        """The route to one member (by local rank), written straight to it, whose message
        names the whole mesh: the member's ``current_rank()`` is its point in this mesh, as
        Monarch's ``choose`` gives it; cached."""
        self._check_generation()
        cache: dict[int, Route] = self.__dict__.setdefault("_members_", {})
        route = cache.get(local)
        if route is None:
            route = cache[local] = Route.member(self._shape_, local, self._proc_addrs)
        return route

    def _install_endpoints(self) -> None:
        eps = endpoints_of(self._cls)
        for name, ep in eps.items():
            setattr(self, name, Endpoint(self, name, ep.signature()))
        for name, value in inspect.getmembers(self._cls):
            if name.startswith("_") or name in eps or name in _RESERVED:
                continue
            if callable(value) and not isinstance(value, EndpointProperty):
                setattr(self, name, NotAnEndpoint(self, name))

    @property
    def _shape(self) -> Shape:
        return self._shape_

    @property
    def _name_text(self) -> str:
        return self._uid

    def _new_with_shape(self, shape: Shape) -> ActorMesh:
        self._check_generation()
        return ActorMesh(self._uid, self._mesh_name, self._cls, shape, self._proc_addrs,
                         self._full_shape, self._fanout, self._tree)

    @property
    def initialized(self) -> Future[None]:
        """Resolves when every member has been created (even if its ``__init__`` failed)."""
        st = api_state(runtime()).mesh_state.get(self._uid)
        if st is None:
            return completed(None)
        return Future._from(st.ready)

    def stop(self, reason: str = "stopped by client") -> Future[None]:
        """Stop every member of this mesh or slice (``__cleanup__`` runs).

        Later calls to the stopped members raise ``SupervisionError``; other members of the
        mesh (outside a stopped slice) keep working.
        """
        rt = runtime()
        ranks = self._shape_.ranks()
        if ranks == self._full_shape.ranks():  # supervision refuses calls to them from now
            supervisor(rt).mesh_stopped(self._uid, reason)
            payload = api_state(rt).spawned.pop(self._uid, None)  # never respawned again
            if payload is not None:  # a detached proc mesh's workers forget it
                _reattach.drop_actor(rt, payload)
        else:
            supervisor(rt).ranks_stopped(self._uid, frozenset(ranks), reason)
        done = Completion(f"mesh {self._uid} to stop")
        live = {g: self._proc_addrs[g] for g in ranks  # a dead member has nothing to stop
                if self._proc_addrs[g] not in rt.dead_addrs}
        # each member answers with its rank; one whose proc is lost meanwhile counts as stopped
        port = members_port(live, done)
        route = self._route
        if route.tree is not None:  # down the tree the calls before it took: after them
            data, buffers = dumps(StopActor(self._uid, reason, port))
            post_call(rt, route, self._uid, SYSTEM_ENDPOINT + StopActor.KIND, None,
                      [data, *buffers])
            return Future._from(done)
        for addr in live.values():
            rt.send_sys(addr, StopActor(self._uid, reason, port))
        return Future._from(done)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActorMesh, (self._uid, self._mesh_name, self._cls, self._shape_,
                            _reachable(self._proc_addrs), self._full_shape, self._fanout))

    def __repr__(self) -> str:
        return f"<ActorMesh {self._uid} {self._class_name} {self._shape_.extent}>"


def _reachable(addrs: tuple[str, ...]) -> tuple[str, ...]:
    """``addrs`` as a peer on another host must dial them: this process's own address (an
    actor spawned on ``this_proc()``, say) becomes its tcp address once it has one (the
    local one may be an abstract unix socket, which exists in this network namespace only).
    This process still delivers to that tcp address locally."""
    rt = _current.get()
    tcp = rt.router.tcp_identity if rt is not None else None
    if not tcp or rt is None or rt.address not in addrs:
        return addrs
    return tuple(tcp if a == rt.address else a for a in addrs)


_RESERVED = frozenset(
    n for n in dir(ActorMesh) if not n.startswith("__")
) | {"slice", "stop", "initialized", "extent", "size", "sizes", "flatten", "split", "rename"}


def _check_collisions(cls: type) -> None:
    for name in endpoints_of(cls):
        if name in _RESERVED:
            raise ValueError(
                f"ActorMesh has an attribute that collides with an endpoint name: {name!r} "
                f"(in {cls.__qualname__}); rename the endpoint"
            )


class NotAnActorClass(ValueError, TypeError):
    """``spawn`` of something that is not an Actor subclass: a ``ValueError`` (regency's
    earlier error, and Monarch's for a class) and a ``TypeError`` (Monarch's for an
    instance)."""


def _check_spawnable(Class: Any) -> None:
    if not (isinstance(Class, type) and issubclass(Class, Actor)):
        raise NotAnActorClass(
            f"{Class!r} must subclass regency.actor.Actor to spawn it (spawn takes the class "
            "itself, then its constructor's arguments)")
    is_async_actor(Class)
    limit_of(Class)  # a __mailbox_limit__ that is not a MailboxLimit: TypeError here
    _check_collisions(Class)
    _check_hooks(Class)


def _check_hooks(Class: type) -> None:
    if is_async_actor(Class):
        return
    for hook in ("__cleanup__", "__supervise__"):
        fn = getattr(Class, hook, None)
        if fn is not None and inspect.iscoroutinefunction(fn):
            raise ValueError(  # Monarch's words, then ours
                f"{Class!r} has sync endpoints, but an async {hook}. Make sure {hook} is also "
                f"synchronous ({Class.__qualname__} is a sync actor: make {hook} a plain def, "
                "or make every endpoint async def)")


