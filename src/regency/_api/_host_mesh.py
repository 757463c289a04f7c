"""``HostMesh``: a mesh of machines; ``spawn_procs`` starts procs on each."""


from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import cloudpickle

from .. import config
from .._mesh import MeshTrait, Shape
from .._wire._messages import SpawnProcs
from ._bootstrap import runtime
from ._dispatch import supervisor
from ._future import Future, completed
from ._mesh_state import _owner_uid, _state, _token
from ._proc_mesh import ProcMesh
from ._state import ProcMeshRecord, api_state

__all__ = ["HostMesh"]

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
        for agent, procs in requests.items():
            # procs on this machine start in our current environment; a worker's procs in
            # the worker's own (its paths, its interpreter), as Monarch does
            if agent in rt.my_addresses:
                msg = SpawnProcs(procs, spec, rt.contact, uid, dict(os.environ), os.getcwd(),
                                 list(sys.path))
            else:
                msg = SpawnProcs(procs, spec, rt.contact, uid)
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
        from ._workers import release_workers

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
