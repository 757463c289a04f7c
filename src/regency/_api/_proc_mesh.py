"""``ProcMesh``: a mesh of OS processes; ``spawn`` puts an actor in each."""


from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, TypeVar

from .. import config
from .._mesh import MeshTrait, Shape
from .._runtime._completion import Completion
from .._runtime._pickling import describe_unpicklable, dumps, dumps_inband
from .._wire import _messages as m
from .._wire import system_header
from ..errors import SupervisionError
from ._actor import Actor
from ._actor_mesh import ActorMesh, _check_spawnable
from ._bootstrap import runtime
from ._dispatch import supervisor
from ._future import Future, completed
from ._mesh_state import _creator, _owner_uid, _qualname, _state, _token, countdown_port
from ._state import OwnedMesh, api_state

__all__ = ["ProcMesh"]

if TYPE_CHECKING:
    from ._host_mesh import HostMesh

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
        from ._host_mesh import HostMesh

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

    def _check_alive(self) -> None:
        st = api_state(runtime()).mesh_state.get(self._uid)
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
        info = api_state(rt).proc_meshes.get(self._uid)
        if info is not None and len(st.stopped_ranks) == len(info.addr_list):
            st.stopped = reason
            supervisor(rt).mesh_stopped(self._uid, reason)
        rt.troubles += 1
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


