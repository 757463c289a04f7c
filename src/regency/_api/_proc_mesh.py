"""``ProcMesh``, a mesh of OS processes (``spawn`` puts an actor in each), and ``HostMesh``,
a mesh of machines (``spawn_procs`` starts procs on each).

One module for both: a host mesh makes proc meshes, and a proc mesh names its host.
"""


from __future__ import annotations

import inspect
import os
import socket
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import cloudpickle

from .. import config
from .._mesh import MeshTrait, Shape
from .._observe._progress import watch_spawn
from .._runtime._completion import Completion
from .._runtime._pickling import describe_unpicklable, dumps, dumps_inband
from .._runtime._runtime import Runtime
from .._wire import _messages as m
from .._wire import system_header
from ..errors import SupervisionError
from ._actor import Actor
from ._actor_mesh import ActorMesh, _check_spawnable
from ._future import Future, completed
from ._leases import release_workers
from ._mesh_state import _creator, _owner_uid, _qualname, _state, _token, countdown_port
from ._process import runtime
from ._state import OwnedMesh, ProcMeshRecord, api_state, supervisor

__all__ = ["HostMesh", "ProcMesh", "proc_mesh_of", "this_host", "this_proc"]

T = TypeVar("T", bound=Actor)


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
        st = api_state(runtime()).mesh_state.get(self._uid)
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
        rt = runtime()
        self._check_alive(rt)
        uid = f"{name}-{_token()}"
        shape = self._shape_
        st = _state(uid, len(shape))
        ack_port = countdown_port(len(shape), st.ready)
        api_state(rt).owned[uid] = OwnedMesh(uid, _qualname(Class), shape, self._proc_addrs,
                                             _owner_uid())
        try:
            body = dumps_inband((Class, args, kwargs))
        except Exception as exc:
            raise TypeError(f"spawn of {Class.__qualname__}: {describe_unpicklable(args, kwargs)}"
                            ) from exc
        fanout = int(config.get("max_cast_fanout"))
        payload = m.SpawnActor(uid, name, body, _qualname(Class), fanout, shape,
                               self._proc_addrs, rt.contact, _owner_uid(), _creator(), ack_port,
                               self)
        data, buffers = dumps(payload)  # pickled once for every proc
        frame = [system_header(payload.KIND), data, *buffers]
        supervisor(rt).mesh_spawned(uid, _owner_uid(), "actor", name, shape, self._proc_addrs,
                                    _qualname(Class))  # before any member can fail
        for g in shape.ranks():
            rt.post(self._proc_addrs[g], frame)
        mesh = ActorMesh(uid, name, Class, shape, self._proc_addrs, shape, fanout)
        return mesh  # type: ignore[return-value]

    def _check_alive(self, rt: Runtime) -> None:
        """Raise supervision's refusal of a spawn on this (sliced) proc mesh, if any:
        ``RuntimeError`` when it was stopped, ``SupervisionError`` when procs are dead."""
        members = [(g, self._proc_addrs[g]) for g in self._shape_.ranks()]
        refusal = supervisor(rt).spawn_refusal(self._uid, self._mesh_name, members)
        if refusal is not None:
            why, stopped = refusal
            raise RuntimeError(why) if stopped else SupervisionError(why)

    def stop(self, reason: str = "stopped by client") -> Future[None]:
        """Stop every proc of the mesh and its actors (``__cleanup__`` runs)."""
        rt = runtime()
        info = api_state(rt).proc_meshes.get(self._uid)
        size = len(info.addr_list) if info is not None else None
        ranks = supervisor(rt).procs_stopped(self._uid, self._shape_.ranks(), size, reason)
        if not ranks:
            return completed(None)  # stopped already: a second stop is a no-op
        if info is not None and len(ranks) == size:
            info.state.stopped = reason  # stopped as a whole: shutdown need not stop it again
        by_agent: dict[str, list[str]] = {}
        for g in ranks:
            by_agent.setdefault(self._host_agents[g], []).append(self._proc_addrs[g])
        done = Completion(f"proc mesh {self._uid} to stop")
        port = countdown_port(len(by_agent), done)
        for agent, addrs in by_agent.items():
            rt.send_sys(agent, m.StopProcs(addrs, reason, port))
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
        api_state(rt).proc_meshes[uid] = ProcMeshRecord(st, addrs, agents, _owner_uid(), name,
                                                        shape)
        spec = {"job": rt.job, "root": rt.root, "mesh_uid": uid,
                "mesh_name": name, "shape": shape, "proc_addrs": tuple(addrs),
                "host_agents": tuple(agents),
                "bootstrap": _pickled(bootstrap), "config": config.get_runtime_config()}
        supervisor(rt).mesh_spawned(uid, _owner_uid(), "proc", name, shape, tuple(addrs))
        if rt.role == "controller" and _owner_uid() is None:  # procs up / total on a TTY
            watch_spawn(st, len(addrs), len(requests), name)
        for agent, procs in requests.items():
            # procs on this machine start in our current environment; a worker's procs in
            # the worker's own (its paths, its interpreter), as Monarch does
            if agent in rt.my_addresses:
                msg = m.SpawnProcs(procs, spec, rt.contact, uid, dict(os.environ), os.getcwd(),
                                 list(sys.path))
            else:
                msg = m.SpawnProcs(procs, spec, rt.contact, uid)
            rt.send_sys(agent, msg)
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
        agents = tuple(self._agents[g] for g in self._shape_.ranks())
        rt = runtime()
        remote = tuple(a for a in agents if a.startswith("tcp:"))
        for info in api_state(rt).proc_meshes.values():
            if any(a in agents for a in info.agents):
                info.state.stopped = info.state.stopped or "host mesh stopped"
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


def proc_mesh_of(rt: Runtime) -> ProcMesh:
    """The proc of ``rt``, as a 0-dimensional ProcMesh."""
    return ProcMesh(rt.proc_uid, "root", Shape.unity(), (rt.address,), (rt.host_agent,))


def this_proc() -> ProcMesh:
    """The proc this code runs in, as a 0-dimensional ProcMesh.

    On the controller, actors spawned on it run inside the controller's own process.
    """
    return proc_mesh_of(runtime())


def this_host() -> HostMesh:
    """This machine, as a 0-dimensional HostMesh (a reference: it cannot be shut down)."""
    rt = runtime()
    agent = rt.agent
    if agent is not None:
        rt.call_soon(agent.start_zygote)  # warm the fork server before the first spawn
    return HostMesh(Shape.unity(), (rt.host_agent,), owned=False)
