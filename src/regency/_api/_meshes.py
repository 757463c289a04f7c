"""``HostMesh`` → ``ProcMesh`` → ``ActorMesh``: the meshes users spawn, slice and call."""

from __future__ import annotations

import inspect
import os
import pickle
import secrets
import socket
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import cloudpickle

from .. import config
from .._mesh import MeshTrait, Shape
from .._runtime import _messages as m
from .._runtime._completion import Completion
from .._runtime._pickling import describe_unpicklable, dumps, dumps_inband
from .._runtime._relay import Tree
from ..errors import SupervisionError
from ._actor import Actor, EndpointProperty, NotAnEndpoint, endpoints_of, is_async_actor
from ._bootstrap import runtime
from ._context import _current
from ._dispatch import supervisor
from ._endpoint import Endpoint
from ._future import Future, completed

__all__ = ["ActorMesh", "HostMesh", "ProcMesh"]

T = TypeVar("T", bound=Actor)


def _token() -> str:
    return secrets.token_hex(5)


class _MeshState:
    """State shared by a mesh and its slices in this process (never pickled)."""

    def __init__(self, n: int) -> None:
        self.ready = Completion("the mesh to start")
        self.waiting = n
        self.stopped: str | None = None  # proc meshes: the whole mesh was stopped
        self.stopped_ranks: set[int] = set()  # actor meshes: members stopped so far
        self.stop_reason = ""
        if n == 0:
            self.ready.set_result(True)


def _state(uid: str, n: int = 0) -> _MeshState:
    table: dict[str, _MeshState] = runtime().extra.setdefault("mesh_state", {})
    st = table.get(uid)
    if st is None:
        st = table[uid] = _MeshState(n)
    return st


class Route:
    """The members of a (sliced) mesh: ranks, their procs' addresses, the cast header.

    ``hops`` are the addresses the sender writes to: the members themselves, or for a mesh
    larger than the fan-out, the first relays of its tree (``tree``).
    """

    __slots__ = ("addrs", "cast", "hops", "ranks", "shape", "targets", "tree")

    def __init__(self, shape: Shape, proc_addrs: tuple[str, ...], tree: Tree | None) -> None:
        s = shape.slice
        self.shape = shape
        self.ranks = tuple(shape.ranks())
        self.addrs = [proc_addrs[g] for g in self.ranks]
        self.targets = frozenset(self.addrs)
        self.cast = (shape.labels, s.offset, s.sizes, s.strides)
        self.tree = tree
        self.hops = self.addrs if tree is None else tree.next_hops(-1, self.cast, ())

    def current_hops(self, dead: dict[str, str]) -> list[str]:
        """``hops``, routing around relays known to be dead."""
        if self.tree is None or not dead:
            return self.hops
        return self.tree.next_hops(-1, self.cast, dead)


def _tree_for(full: Shape, proc_addrs: tuple[str, ...], fanout: int) -> Tree | None:
    if len(full) <= fanout:
        return None
    ranks = full.ranks()
    return Tree(ranks, [proc_addrs[g] for g in ranks], fanout)


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
        self._proc_addrs = proc_addrs
        self._full_shape = full_shape or shape
        self._fanout = fanout or int(config.get("max_cast_fanout"))
        self._tree = tree or _tree_for(self._full_shape, proc_addrs, self._fanout)
        self._install_endpoints()

    @property
    def _route(self) -> Route:
        """Where a message to this (sliced) mesh goes; computed once per mesh object."""
        route = self.__dict__.get("_route_")
        if route is None:
            route = self.__dict__["_route_"] = Route(self._shape_, self._proc_addrs, self._tree)
        return route

    def _member_route(self, local: int) -> Route:
        """The route to one member (by local rank), keeping the dimensions; cached."""
        cache: dict[int, Route] = self.__dict__.setdefault("_members_", {})
        route = cache.get(local)
        if route is None:
            shape = self._shape_
            coords = shape.slice.coordinates(local)
            one = shape.select(**{lab: slice(c, c + 1) for lab, c in zip(shape.labels, coords)})
            route = cache[local] = Route(one, self._proc_addrs, self._tree)
        return route

    def _install_endpoints(self) -> None:
        eps = endpoints_of(self._cls)
        for name, ep in eps.items():
            setattr(self, name, Endpoint(self, name, ep.signature(), ep.explicit_response_port))
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
        return ActorMesh(self._uid, self._mesh_name, self._cls, shape, self._proc_addrs,
                         self._full_shape, self._fanout, self._tree)

    def _dead_reason(self, route: Route) -> str | None:
        rt = runtime()
        st = rt.extra.get("mesh_state", {}).get(self._uid)
        if st is not None and st.stopped_ranks:
            hit = [g for g in route.ranks if g in st.stopped_ranks]
            if hit:
                return f"rank(s) {hit} of mesh {self._uid} were stopped ({st.stop_reason})"
        failed: dict[int, Any] = rt.extra.get("failed_ranks", {}).get(self._uid, {})
        dead = rt.dead_addrs
        if not failed and not dead:
            return None
        for g in route.ranks:
            if g in failed:
                return f"rank {g} of mesh {self._uid} failed: {failed[g].cause}"
            why = dead.get(self._proc_addrs[g])
            if why is not None:
                return f"rank {g} of mesh {self._uid}: {why}"
        return None

    @property
    def initialized(self) -> Future[None]:
        """Resolves when every member has been created (even if its ``__init__`` failed)."""
        st = runtime().extra.get("mesh_state", {}).get(self._uid)
        if st is None:
            return completed(None)
        return Future._from(st.ready)

    def stop(self, reason: str = "stopped by client") -> Future[None]:
        """Stop every member of this mesh or slice (``__cleanup__`` runs).

        Later calls to the stopped members raise ``SupervisionError``; other members of the
        mesh (outside a stopped slice) keep working.
        """
        rt = runtime()
        st = _state(self._uid)
        st.stopped_ranks.update(self._shape_.ranks())
        st.stop_reason = reason
        rt.troubles += 1
        if self._shape_.ranks() == self._full_shape.ranks():
            supervisor(rt).mesh_stopped(self._uid, reason)
        ranks = self._shape_.ranks()
        done = Completion(f"mesh {self._uid} to stop")
        left = {"n": len(ranks)}

        def ack(env: tuple[Any, ...], frame: list[memoryview]) -> None:
            left["n"] -= 1
            if left["n"] <= 0:
                rt.close_port(port_id)
                done.set_result(None)

        port_id = rt.open_port(ack)
        if not ranks:
            done.set_result(None)
        for g in ranks:
            addr = self._proc_addrs[g]
            if addr in rt.dead_addrs:
                rt.call_soon(ack, (), [])
            else:
                rt.send_sys(addr, "stop_actor", uid=self._uid, reason=reason,
                            port=(rt.contact, port_id))
        return Future._from(done)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActorMesh, (self._uid, self._mesh_name, self._cls, self._shape_, self._proc_addrs,
                            self._full_shape, self._fanout))

    def __repr__(self) -> str:
        return f"<ActorMesh {self._uid} {self._class_name} {self._shape_.extent}>"


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


class ProcMesh(MeshTrait):
    """A mesh of OS processes; ``spawn`` puts one actor of a class in each."""

    def __init__(self, uid: str, name: str, shape: Shape, proc_addrs: tuple[str, ...],
                 host_agents: tuple[str, ...]) -> None:
        self._uid = uid
        self._mesh_name = name
        self._shape_ = shape
        self._proc_addrs = proc_addrs
        self._host_agents = host_agents

    @property
    def _shape(self) -> Shape:
        return self._shape_

    def _new_with_shape(self, shape: Shape) -> ProcMesh:
        return ProcMesh(self._uid, self._mesh_name, shape, self._proc_addrs, self._host_agents)

    @property
    def initialized(self) -> Future[bool]:
        """Resolves to True once every proc is up (and its bootstrap ran)."""
        st = runtime().extra.get("mesh_state", {}).get(self._uid)
        return Future._from(st.ready) if st is not None else completed(True)

    @property
    def host_mesh(self) -> HostMesh:
        """The host of a single-proc mesh."""
        if len(self._shape_) != 1:
            raise NotImplementedError("host_mesh is only defined for a mesh of one proc")
        agent = self._host_agents[self._shape_.ranks()[0]]
        return HostMesh(Shape.unity(), (agent,), owned=False)

    def spawn(self, name: str, Class: type[T], *args: Any, **kwargs: Any) -> T:
        """Spawn one ``Class(*args, **kwargs)`` actor in every proc; returns the ActorMesh.

        Returns at once; ``__init__`` runs before any message to the actor.

        Raises:
            ValueError: ``Class`` is not an Actor subclass, mixes sync and async endpoints,
                or has an endpoint named like a mesh attribute.
            TypeError: the arguments do not match ``Class.__init__``.
            RuntimeError: the mesh was stopped, or some of its procs are dead.
        """
        _check_spawnable(Class)
        try:
            inspect.signature(Class.__init__).bind(None, *args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"spawn of {Class.__qualname__}: {exc}") from None
        self._check_alive()
        uid = f"{name}-{_token()}"
        rt = runtime()
        shape = self._shape_
        st = _state(uid, len(shape))
        ack_port = _counting_port(st)
        rt.extra.setdefault("owned", {})[uid] = _owner_record(uid, Class, shape, self)
        try:
            body = dumps_inband((Class, args, kwargs))
        except Exception as exc:
            raise TypeError(f"spawn of {Class.__qualname__}: {describe_unpicklable(args, kwargs)}"
                            ) from exc
        fanout = int(config.get("max_cast_fanout"))
        payload = {"uid": uid, "name": name, "body": body, "class_name": _qualname(Class),
                   "fanout": fanout,
                   "shape": shape, "proc_addrs": self._proc_addrs, "owner": rt.contact,
                   "owner_uid": _owner_uid(), "creator": _creator(), "ack": ack_port,
                   "proc_mesh": self}
        data, buffers = dumps(payload)
        frame = [pickle.dumps((m.SYS, "spawn_actor")), data, *buffers]
        for g in shape.ranks():
            rt.post(self._proc_addrs[g], frame)
        supervisor(rt).mesh_spawned(uid, _owner_uid(), "actor", name, shape, self._proc_addrs,
                                    _qualname(Class))
        mesh = ActorMesh(uid, name, Class, shape, self._proc_addrs, shape, fanout)
        return mesh  # type: ignore[return-value]

    def _check_alive(self) -> None:
        st = runtime().extra.get("mesh_state", {}).get(self._uid)
        if st is not None and st.stopped_ranks.intersection(self._shape_.ranks()):
            raise RuntimeError(f"`ProcMesh` {self._uid} has already been stopped")
        dead = runtime().dead_addrs
        bad = [g for g in self._shape_.ranks() if self._proc_addrs[g] in dead]
        if bad:
            why = dead[self._proc_addrs[bad[0]]]
            raise SupervisionError(
                f"cannot spawn on proc mesh {self._uid}: rank(s) {bad} are dead ({why}); "
                "spawn on a slice of healthy procs or on a new proc mesh"
            )

    def stop(self, reason: str = "stopped by client") -> Future[None]:
        """Stop every proc of the mesh and its actors (``__cleanup__`` runs)."""
        rt = runtime()
        st = _state(self._uid)
        ranks = [g for g in self._shape_.ranks() if g not in st.stopped_ranks]
        if not ranks:
            return completed(None)
        st.stopped_ranks.update(ranks)
        st.stop_reason = reason
        info = rt.extra.get("proc_meshes", {}).get(self._uid)
        if info is not None and len(st.stopped_ranks) == len(info["addr_list"]):
            st.stopped = reason
            supervisor(rt).mesh_stopped(self._uid, reason)
        rt.troubles += 1
        by_agent: dict[str, list[str]] = {}
        for g in ranks:
            by_agent.setdefault(self._host_agents[g], []).append(self._proc_addrs[g])
        done = Completion(f"proc mesh {self._uid} to stop")
        left = {"n": len(by_agent)}

        def ack(env: tuple[Any, ...], frame: list[memoryview]) -> None:
            left["n"] -= 1
            if left["n"] <= 0:
                rt.close_port(port_id)
                done.set_result(None)

        port_id = rt.open_port(ack)
        if not by_agent:
            done.set_result(None)
        for agent, addrs in by_agent.items():
            rt.send_sys(agent, "stop_procs", addrs=addrs, reason=reason,
                        port=(rt.contact, port_id))
        return Future._from(done)

    async def logging_option(self, stream_to_client: bool = True,
                             aggregate_window_sec: int | None = None, level: int = 20) -> None:
        """Accepted for Monarch compatibility: output is forwarded with a prefix by default."""

    async def __aenter__(self) -> ProcMesh:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def __reduce__(self) -> tuple[Any, ...]:
        return (ProcMesh, (self._uid, self._mesh_name, self._shape_, self._proc_addrs,
                           self._host_agents))

    def __repr__(self) -> str:
        return f"<ProcMesh {self._uid} {self._shape_.extent}>"


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_spawnable(Class: Any) -> None:
    if not (isinstance(Class, type) and issubclass(Class, Actor)):
        raise ValueError(f"spawn needs a subclass of regency.actor.Actor, got {Class!r}")
    is_async_actor(Class)
    _check_collisions(Class)
    _check_hooks(Class)


def _check_hooks(Class: type) -> None:
    if is_async_actor(Class):
        return
    for hook in ("__cleanup__", "__supervise__"):
        fn = getattr(Class, hook, None)
        if fn is not None and inspect.iscoroutinefunction(fn):
            raise ValueError(f"{Class.__qualname__} is a sync actor, so {hook} must be sync too")


def _counting_port(st: _MeshState) -> tuple[str, int]:
    rt = runtime()

    def ack(env: tuple[Any, ...], frame: list[memoryview]) -> None:
        st.waiting -= 1
        if st.waiting <= 0:
            rt.close_port(port_id)
            st.ready.set_result(None)

    port_id = rt.open_port(ack)
    return (rt.contact, port_id)


def _owner_uid() -> str | None:
    ctx = _current.get(None)
    return ctx.actor_instance.mesh_uid if ctx is not None else None


def _creator() -> Any:
    ctx = _current.get(None)
    if ctx is None:
        from ._bootstrap import root_context

        ctx = root_context()
    inst = ctx.actor_instance
    from ._context import Instance

    return Instance(inst.actor_id, inst.name, inst.class_name, inst.rank, inst.proc_id,
                    inst.creator, inst.mesh_uid)


def _owner_record(uid: str, cls: type, shape: Shape, pm: ProcMesh) -> dict[str, Any]:
    return {"uid": uid, "class": f"{cls.__module__}.{cls.__qualname__}", "shape": shape,
            "proc_addrs": pm._proc_addrs, "owner_uid": _owner_uid()}


def _proc_address(job: str, uid: str, rank: int, agent: str) -> str:
    """Where a new proc will listen, by the configured transport.

    Procs of a remote host (a worker, reached over tcp) get a logical ``via:`` name that their
    host agent resolves to the port they bound.
    """
    short = uid.rsplit("-", 1)[-1]  # the random part: names may be long or odd
    if agent.startswith("tcp:"):
        return f"via:{agent}/{short}-{rank}"
    transport = str(config.get("default_transport"))
    if transport in ("unix", "ipc"):
        return f"unix:@regency-{job}-{short}-{rank}"
    if transport == "tcp":
        return f"tcp:127.0.0.1:{_free_port()}"
    raise ValueError(f"unknown transport {transport!r}; use 'unix' or 'tcp'")


def _pickled(fn: Callable[[], Any] | None) -> bytes | None:
    """The bootstrap callable, pickled by value here (procs cannot import our __main__)."""
    if fn is None:
        return None
    if not callable(fn):
        raise TypeError(f"bootstrap must be a callable taking no arguments, got {fn!r}")
    try:
        return cloudpickle.dumps(fn)
    except Exception as exc:
        raise TypeError(f"bootstrap {fn!r} cannot be pickled: {exc}") from exc


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HostMesh(MeshTrait):
    """A mesh of machines; ``spawn_procs`` starts procs on each."""

    def __init__(self, shape: Shape, agents: tuple[str, ...], owned: bool = False) -> None:
        self._shape_ = shape
        self._agents = agents
        self._owned = owned

    @property
    def _shape(self) -> Shape:
        return self._shape_

    def _new_with_shape(self, shape: Shape) -> HostMesh:
        return HostMesh(shape, self._agents, owned=False)

    @property
    def initialized(self) -> Future[bool]:
        """Resolves to True once the hosts are reachable."""
        return completed(True)

    def spawn_procs(
        self,
        per_host: dict[str, int] | None = None,
        bootstrap: Callable[[], Any] | None = None,
        name: str | None = None,
        proc_bind: Any = None,
        bootstrap_command: Any = None,
    ) -> ProcMesh:
        """Start ``per_host`` procs on every host; returns the ProcMesh at once.

        The mesh's dimensions are the host dimensions followed by ``per_host``'s. Each proc
        starts from the fork server with the caller's *current* environment, working
        directory and ``sys.path``; ``bootstrap`` runs in each before any actor.
        """
        per_host = dict(per_host or {})
        clash = set(per_host) & set(self._shape_.labels)
        if clash:
            raise ValueError(f"per_host dimension(s) {sorted(clash)} clash with host dimensions")
        for label, size in per_host.items():
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"per_host[{label!r}] must be a positive int, got {size!r}")
        name = name or "anon"
        rt = runtime()
        uid = f"{name}-{_token()}"
        shape = Shape.from_sizes(self._shape_.labels + tuple(per_host),
                                 self._shape_.extent.sizes + tuple(per_host.values()))
        n_local = 1
        for size in per_host.values():
            n_local *= size
        addrs: list[str] = []
        agents: list[str] = []
        requests: dict[str, list[dict[str, Any]]] = {}
        for h, hg in enumerate(self._shape_.ranks()):
            agent = self._agents[hg]
            for i in range(n_local):
                rank = h * n_local + i
                addr = _proc_address(rt.job, uid, rank, agent)
                addrs.append(addr)
                agents.append(agent)
                requests.setdefault(agent, []).append(
                    {"addr": addr, "rank": rank, "label": f"{name} {dict(shape.point(rank))}"})
        st = _state(uid, len(addrs))
        rt.extra.setdefault("proc_meshes", {})[uid] = {
            "state": st, "addrs": set(addrs), "addr_list": addrs, "agents": agents,
            "owner_uid": _owner_uid(), "name": name, "shape": shape}
        spec = {"job": rt.job, "secret": rt.secret, "root": rt.extra["root"], "mesh_uid": uid,
                "mesh_name": name, "shape": shape, "proc_addrs": tuple(addrs),
                "host_agents": tuple(agents),
                "bootstrap": _pickled(bootstrap), "config": config.get_runtime_config()}
        supervisor(rt).mesh_spawned(uid, _owner_uid(), "proc", name, shape, tuple(addrs))
        for agent, procs in requests.items():
            rt.send_sys(agent, "spawn_procs", procs=procs, spec=spec, owner=rt.contact,
                        mesh_uid=uid, env=dict(os.environ), cwd=os.getcwd(),
                        sys_path=list(sys.path))
        return ProcMesh(uid, name, shape, tuple(addrs), tuple(agents))

    def shutdown(self) -> Future[None]:
        """Shut down an owned host mesh: its procs and (for workers) the workers."""
        if not self._owned:
            raise RuntimeError("cannot shut down `HostMesh` that is a reference instead of owned")
        return self._release(exit=True)

    def stop(self) -> Future[None]:
        """Stop the work on the hosts (their procs) but keep the workers for reuse."""
        if not self._owned:
            raise RuntimeError("cannot stop `HostMesh` that is a reference instead of owned")
        return self._release(exit=False)

    def _release(self, exit: bool) -> Future[None]:
        from ._workers import release_workers

        agents = tuple(self._agents[g] for g in self._shape_.ranks())
        rt = runtime()
        remote = tuple(a for a in agents if a.startswith("tcp:"))
        for info in rt.extra.get("proc_meshes", {}).values():
            if any(a in agents for a in info["agents"]):
                info["state"].stopped = info["state"].stopped or "host mesh stopped"
        if remote:
            release_workers(rt, remote, exit)
        return completed(None)

    async def __aenter__(self) -> HostMesh:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.shutdown()

    def __reduce__(self) -> tuple[Any, ...]:
        return (HostMesh, (self._shape_, self._agents, False))

    def __repr__(self) -> str:
        return f"<HostMesh {self._shape_.extent}>"
