"""``ProcMesh``, a mesh of OS processes (``spawn`` puts an actor in each), and ``HostMesh``,
a mesh of machines (``spawn_procs`` starts procs on each).

One module for both: a host mesh makes proc meshes, and a proc mesh names its host.
"""


from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import cloudpickle

from .. import config
from .._debug._logs import ProcLogs, collect_logs
from .._debug._stacks import Stacks, collect
from .._mesh import MeshTrait, Point, Shape
from .._observe._progress import watch_spawn
from .._runtime import _current, _procbind
from .._runtime._aggregate import Options, set_options
from .._runtime._completion import Completion
from .._runtime._pickling import describe_unpicklable, dumps, dumps_inband
from .._runtime._runtime import Runtime
from .._runtime._script import script
from .._wire import _messages as m
from .._wire import system_header
from ..errors import SupervisionError
from . import _incarnation, _reattach, _topology
from ._actor import Actor
from ._actor_mesh import ActorMesh, _check_spawnable
from ._bootstrap_command import BootstrapCommand, python_command
from ._future import Future, completed
from ._leases import release_workers
from ._mesh_state import (
    _creator,
    _owner_uid,
    _proc_address,
    _qualname,
    _state,
    _token,
    agent_port,
    countdown_port,
)
from ._process import runtime
from ._respawn import respawn as _respawn
from ._state import OwnedMesh, ProcMeshRecord, api_state, supervisor
from ._sync import Workspace
from ._sync import sync_workspace as _sync_workspace
from ._topology import Topology

__all__ = ["HostMesh", "ProcMesh", "proc_mesh_of", "this_host", "this_proc"]

T = TypeVar("T", bound=Actor)

#: Called with a proc mesh at the start of its ``stop()``, while its procs still run (the
#: tensor engine reports there the errors no fetch observed). A hook must not raise.
before_stop: list[Callable[[Any], None]] = []


class ProcMesh(MeshTrait):
    """A mesh of OS processes; ``spawn`` puts one actor of a class in each."""

    def __init__(self, uid: str, name: str, shape: Shape, proc_addrs: tuple[str, ...],
                 host_agents: tuple[str, ...]) -> None:
        self._uid = uid
        self._mesh_name = name
        self._shape_ = shape
        self._addrs_made = proc_addrs
        self._host_agents = host_agents

    @property
    def _proc_addrs(self) -> tuple[str, ...]:
        """The address of each proc, by global rank (respawned ranks at their new proc)."""
        return _incarnation.current(self._addrs_made)

    @property
    def _shape(self) -> Shape:
        return self._shape_

    def _new_with_shape(self, shape: Shape) -> ProcMesh:
        return ProcMesh(self._uid, self._mesh_name, shape, self._proc_addrs, self._host_agents)

    def slice(self, **selections: Any) -> ProcMesh:
        """A sub-mesh (see ``MeshTrait.slice``).

        Raises:
            RuntimeError: the mesh was stopped (Monarch's words: "`ProcMesh` has already
                been stopped").
        """
        rt = _current.get()
        record = api_state(rt).proc_meshes.get(self._uid) if rt is not None else None
        if record is not None and record.state.stopped:
            raise RuntimeError(f"`ProcMesh` has already been stopped: proc mesh "
                               f"{self._mesh_name!r} ({self._uid}) was stopped "
                               f"({record.state.stopped}); spawn_procs() makes a new one")
        return super().slice(**selections)

    @property
    def initialized(self) -> Future[bool]:
        """Resolves to True once every proc is up (and its bootstrap ran)."""
        st = api_state(runtime()).mesh_state.get(self._uid)
        return Future._from(st.ready) if st is not None else completed(True)

    @classmethod
    def from_host_mesh(cls, host_mesh: HostMesh, hy_proc_mesh: Any, region: Any,
                       setup: Callable[[], Any] | None = None) -> ProcMesh:
        """Not in regency: Monarch's internal constructor over a Rust proc-mesh handle.

        Raises:
            TypeError: always; ``host_mesh.spawn_procs(per_host=..., bootstrap=setup)`` makes
                a ProcMesh on a host mesh.
        """
        raise TypeError("ProcMesh.from_host_mesh wraps a Monarch-internal Rust handle and has "
                        "no meaning in regency; use host_mesh.spawn_procs(per_host={...}, "
                        "bootstrap=setup) to get a ProcMesh on a host mesh")

    @property
    def host_mesh(self) -> HostMesh:
        """The host of a single-proc mesh."""
        if len(self._shape_) != 1:
            raise NotImplementedError("host_mesh is only defined for a mesh of one proc")
        agent = self._host_agents[self._shape_.ranks()[0]]
        return HostMesh(Shape.unity(), (agent,), owned=False)

    async def sync_workspace(self, workspace: Workspace, conda: bool = False,
                             auto_reload: bool = False) -> dict[str, Any]:
        """``HostMesh.sync_workspace`` on the hosts of this mesh's procs; ``auto_reload``
        reloads changed modules in this mesh's procs. Example::

            await procs.sync_workspace(Workspace(dirs=["src"]), auto_reload=True)
        """
        if conda:
            raise NotImplementedError("sync_workspace(conda=True): regency syncs directories "
                                      "only; install the environment on the hosts")
        agents = tuple(dict.fromkeys(self._host_agents[g] for g in self._shape_.ranks()))
        hosts = HostMesh(Shape.from_sizes(["hosts"], [len(agents)]), agents, owned=False)
        return await _sync_workspace(hosts, workspace, auto_reload, [self])

    def spawn(self, name: str, Class: type[T], *args: Any, **kwargs: Any) -> T:
        """Spawn one ``Class(*args, **kwargs)`` actor in every proc; returns the ActorMesh.

        Returns at once; ``__init__`` runs before any message to the actor.

        Raises:
            ValueError: ``Class`` is not an Actor subclass, mixes sync and async endpoints,
                or has an endpoint named like a mesh attribute.
            TypeError: ``name`` is not a str, or the arguments do not match
                ``Class.__init__``.
            RuntimeError: the mesh was stopped, or some of its procs are dead.
        """
        if not isinstance(name, str):
            raise TypeError(f"spawn: the mesh name must be a str, not {type(name).__name__} "
                            f"({name!r}); spawn(name, Class, *args)")
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
                                             _owner_uid(), Class)
        try:
            body = dumps_inband((Class, args, kwargs))
        except Exception as exc:
            raise TypeError(f"spawn of {Class.__qualname__}: {describe_unpicklable(args, kwargs)}"
                            ) from exc
        fanout = int(config.get("max_cast_fanout"))
        payload = m.SpawnActor(uid, name, body, _qualname(Class), fanout, shape,
                               self._proc_addrs, rt.contact, _owner_uid(), _creator(), ack_port,
                               self)
        api_state(rt).spawned[uid] = payload  # to rebuild a member on a respawned proc
        data, buffers = dumps(payload)  # pickled once for every proc
        frame = [system_header(payload.KIND), data, *buffers]
        supervisor(rt).mesh_spawned(uid, _owner_uid(), "actor", name, shape, self._proc_addrs,
                                    _qualname(Class))  # before any member can fail
        addrs = [self._proc_addrs[g] for g in shape.ranks()]
        record = api_state(rt).proc_meshes.get(self._uid)
        if record is not None and record.detached:  # the next controller adopts it too:
            # its workers are told before its procs (an end right after loses neither, or
            # the spawn only: a part without its actors is said at reattach)
            _reattach.send_actor(rt, self._uid, payload, then=lambda: _post(rt, addrs, frame))
        else:
            _post(rt, addrs, frame)
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

    def respawn(self, ranks: Iterable[int | Mapping[str, int]] | None = None, *,
                restore: Callable[[dict[str, int], dict[str, ActorMesh]], Any] | None = None,
                timeout: float = 60.0) -> list[int]:
        """Respawn dead ranks in place: same host and coordinates, actors rebuilt (blocks).

        ``ranks`` are local ranks or points (``{"hosts": 0, "gpus": 1}``) of this mesh; by
        default every rank whose proc is dead. A new proc starts for each with the mesh's
        spec; every actor mesh this process spawned there is rebuilt with its constructor
        arguments; later calls (through any mesh object of this process) reach the new
        incarnation. Calls that were in flight to the dead proc have failed with
        ``SupervisionError``. ``restore(point, members)`` then runs for each respawned rank,
        ``members`` being ``{actor mesh name: that mesh sliced to the rank}``. Returns the
        global ranks respawned. Example::

            try:
                losses = trainers.step.call(batch).get()
            except SupervisionError:
                procs.respawn(restore=lambda point, m: m["trainers"].load.call(ckpt).get())

        Raises:
            ValueError: a rank given is not in the mesh, or is alive.
            RuntimeError: this process did not spawn the mesh, or it was stopped.
            SupervisionError: the new procs did not rebuild their actors within ``timeout``.
        """
        return _respawn(self, ranks, restore=restore, timeout=timeout)

    def stop(self, reason: str = "stopped by client") -> Future[None]:
        """Stop every proc of the mesh and its actors (``__cleanup__`` runs).

        Raises:
            ValueError: the mesh is this process itself (``this_proc()``): what runs it
                stops it.
        """
        rt = runtime()
        if tuple(self._proc_addrs) == (rt.address,):
            raise ValueError(  # Monarch's words, then ours
                "ProcMesh is not owned; must be stopped by an owner (this is the proc this "
                "code runs in, `this_proc()`: stop its actor meshes instead, or let the "
                "program end)")
        for hook in before_stop:
            hook(self)
        info = api_state(rt).proc_meshes.get(self._uid)
        size = len(info.addr_list) if info is not None else None
        ranks = supervisor(rt).procs_stopped(self._uid, self._shape_.ranks(), size, reason)
        if not ranks:
            return completed(None)  # stopped already: a second stop is a no-op
        if info is not None and len(ranks) == size:
            info.state.stopped = reason  # stopped as a whole: shutdown need not stop it again
            spawned = api_state(rt).spawned
            for uid in [u for u, p in spawned.items() if p.proc_mesh._uid == self._uid]:
                del spawned[uid]  # their actors are gone with the procs: no respawn
        by_agent: dict[str, list[str]] = {}
        for g in ranks:
            by_agent.setdefault(self._host_agents[g], []).append(self._proc_addrs[g])
        done = Completion(f"proc mesh {self._uid} to stop")
        left = [len(by_agent)]
        in_flight = api_state(rt).stops_in_flight
        in_flight.add(done)

        def stopped_there() -> None:  # an agent answered, or its host was lost
            left[0] -= 1
            if left[0] == 0:
                in_flight.discard(done)
                done.set_result(None)

        for agent, addrs in by_agent.items():
            rt.send_sys(agent, m.StopProcs(addrs, reason, agent_port(agent, stopped_there)))
        if info is not None and info.detached and len(ranks) == size:
            _reattach.forget(rt, self._uid)  # nothing left for the next controller
        return Future._from(done)

    def detach(self) -> None:
        """Keep this mesh's procs, and its actors with their state, running after this
        controller ends (a regency extension; the mesh must be on worker hosts).

        Until then nothing changes. When this controller exits, dies, is released
        (``HostMesh.stop()``) or stops renewing its lease, each worker keeps these procs
        (and what they spawned) instead of killing them, and another controller attached
        to the same workers takes them over with ``hosts.reattach_procs(name)``, then
        ``procs.actor_meshes()``. A slice detaches the whole mesh. Actor meshes spawned
        on it later are kept too. After ``HostMesh.stop()`` this controller's calls to the
        mesh are refused: it was handed over. A reattached mesh ends with its new
        controller unless that one detaches it again. ``HostMesh.shutdown()`` still ends
        the workers and every proc. Example::

            procs = hosts.spawn_procs(per_host={"gpus": 2}, name="trainers")
            model = procs.spawn("model", Model)
            procs.detach()   # the next run: hosts.reattach_procs("trainers")

        Raises:
            ValueError: some procs run on this controller's own host (``this_host()``):
                they end with it.
            RuntimeError: this controller did not spawn (or reattach) the mesh, or it was
                stopped.
        """
        _reattach.detach(runtime(), self._uid, repr(self))

    def actor_meshes(self) -> dict[str, ActorMesh]:
        """The live actor meshes this controller spawned (or reattached) on this proc
        mesh, by name, or by uid where several share a name (a regency extension; after
        ``reattach_procs``, how to reach them). Empty once the proc mesh was stopped or
        handed over."""
        api = api_state(runtime())
        record = api.proc_meshes.get(self._uid)
        if record is None or record.state.stopped:
            return {}
        found = [(uid, payload, owned) for uid, payload in api.spawned.items()
                 if payload.proc_mesh._uid == self._uid
                 and (owned := api.owned.get(uid)) is not None and owned.cls is not None]
        names = [payload.name for _, payload, _ in found]
        out: dict[str, ActorMesh] = {}
        for uid, payload, owned in found:
            key = payload.name if names.count(payload.name) == 1 else uid
            out[key] = ActorMesh(uid, payload.name, owned.cls, payload.shape,
                                 payload.proc_addrs, payload.shape, payload.fanout)
        return out

    def stacks(self, timeout: float = 1.0) -> Stacks:
        """The Python stacks of every thread of every proc of this mesh, grouped.

        Works on a proc stuck in a tight loop or a C call (see ``regency._debug._dumps``).
        ``str()`` of the result shows identical stacks once, with the ranks that share them.
        """
        procs = [(self._mesh_name, i, self._proc_addrs[g], self._host_agents[g])
                 for i, g in enumerate(self._shape_.ranks())]
        return collect(runtime(), procs, timeout)

    def logs(self, tail: int = 100, timeout: float = 5.0) -> ProcLogs:
        """The last ``tail`` lines each proc of this mesh printed, read from its log file
        where it runs (a regency extension; procs that exited and other hosts included).

        Every line is there, whatever ``logging_option`` showed. ``str()`` of the result
        shows one section per proc; ``.of(rank)`` or ``.of(gpus=1)`` one proc's lines.

        Ranks and coordinates are those of this mesh (a slice counts from 0). A respawned
        rank's earlier procs are read too (``ProcLog.earlier``).

        Raises:
            ValueError: ``tail`` is negative, or ``timeout`` not positive.
        """
        if int(tail) < 0:
            raise ValueError(f"tail must be >= 0 lines, got {tail!r}")
        if not float(timeout) > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        ranks = self._shape_.ranks()
        rt = runtime()
        if rt.role == "controller" and tuple(self._proc_addrs) == (rt.address,):
            return ProcLogs([], {0: "this is the controller: what it prints goes to your "
                                    "terminal, not to a log file"}, {0: {}})
        procs = [(self._mesh_name, i, self._proc_addrs[g], self._host_agents[g])
                 for i, g in enumerate(ranks)]
        coords = [dict(Point(i, self._shape_.extent)) for i in range(len(ranks))]
        earlier = [_incarnation.earlier(self._addrs_made[g]) for g in ranks]
        return collect_logs(rt, procs, coords, earlier, int(tail), float(timeout))

    # -- the tensor engine: regency._tensor, loaded on first use (it imports torch) --------
    def activate(self) -> Any:
        """A context in which torch ops run on every proc of this mesh (the tensor engine;
        needs torch). See ``docs/tensors.md``."""
        return _tensor_api().activate(self)

    def rank_tensor(self, dim: str | Sequence[str]) -> Any:
        """A remote 0-d int64 tensor: each proc's coordinate along ``dim`` (row-major rank
        over several dims)."""
        api = _tensor_api()
        return api.rank_tensor(api.device_mesh_of(self), dim)

    def rank_tensors(self) -> dict[str, Any]:
        """``rank_tensor`` of every dim, by name."""
        return _tensor_api().rank_tensors(self)  # type: ignore[no-any-return,unused-ignore]

    def process_group(self, dims: str | Sequence[str]) -> Any:
        """The torch.distributed group over ``dims``, for ``remote`` functions (gloo on CPU)."""
        api = _tensor_api()
        return api.process_group(api.device_mesh_of(self), dims)

    def to_table(self) -> str:
        """A text table of this mesh's ranks laid out by its dims (the last dim across;
        one table per index of the dims before the last two)."""
        labels = list(self._shape_.labels)
        sizes = [self.sizes[d] for d in labels]
        return _rank_table(labels, sizes)

    async def logging_option(self, stream_to_client: bool = True,
                             aggregate_window_sec: float | None = None,
                             level: int = 20) -> None:
        """How this mesh's output shows on the controller's terminal (display only: every
        line is still kept in the proc's log file and the failure reports' tail).

        Args:
            stream_to_client: False shows none of it.
            aggregate_window_sec: hold lines this long, then show lines that several ranks
                printed alike (numbers aside) once, as ``[N similar lines from <procs>] text``.
            level: stdout lines count as INFO (20), stderr lines as WARNING (30); lines
                below ``level`` are not shown.

        Raises:
            ValueError: ``level`` outside 0..255, or a negative window.
        """
        if not 0 <= int(level) <= 255:
            raise ValueError(f"logging_option: invalid logging level {level} (0..255)")
        if aggregate_window_sec is not None and aggregate_window_sec < 0:
            raise ValueError(f"logging_option: aggregate_window_sec={aggregate_window_sec} "
                             "is negative")
        set_options(self._mesh_name, Options(bool(stream_to_client), aggregate_window_sec,
                                             int(level)))

    async def __aenter__(self) -> ProcMesh:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def __reduce__(self) -> tuple[Any, ...]:
        return (ProcMesh, (self._uid, self._mesh_name, self._shape_, self._proc_addrs,
                           self._host_agents))

    def __repr__(self) -> str:
        return f"<ProcMesh {self._uid} {self._shape_.extent}>"


def _post(rt: Runtime, addrs: list[str], frame: list[Any]) -> None:
    for addr in addrs:
        rt.post(addr, frame)


def _rank_table(labels: list[str], sizes: list[int]) -> str:
    """Ranks 0..n-1 (row-major over ``sizes``) as grid tables; see ``ProcMesh.to_table``."""
    if not sizes:
        return "rank 0 (a mesh with no dims)"
    cols = sizes[-1]
    rows = sizes[-2] if len(sizes) > 1 else 1
    outer = 1
    for s in sizes[:-2]:
        outer *= s
    out: list[str] = []
    for o in range(outer):
        if len(sizes) > 2:
            idx, rem = [], o
            for s in reversed(sizes[:-2]):
                rem, i = divmod(rem, s)
                idx.append(i)
            out.append(", ".join(f"{d}={i}" for d, i in zip(labels[:-2], reversed(idx))))
        head = [f"{labels[-2]} \\ {labels[-1]}" if len(sizes) > 1 else labels[-1]]
        cells = [head + [str(c) for c in range(cols)]]
        for r in range(rows):
            first = [str(r)] if len(sizes) > 1 else ["rank"]
            base = (o * rows + r) * cols
            cells.append(first + [str(base + c) for c in range(cols)])
        width = max(len(c) for row in cells for c in row)
        line = "+" + "+".join("-" * (width + 2) for _ in cells[0]) + "+"
        out.append(line)
        for row in cells:
            out.append("| " + " | ".join(c.rjust(width) for c in row) + " |")
            out.append(line)
    return "\n".join(out)


def _tensor_api() -> Any:
    """regency._tensor.api, imported on first use: the core never imports torch."""
    return importlib.import_module("regency._tensor.api")


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


class HostMesh(MeshTrait):
    """A mesh of machines; ``spawn_procs`` starts procs on each."""

    def __init__(self, shape: Shape, agents: tuple[str, ...], owned: bool = False,
                 command: BootstrapCommand | None = None) -> None:
        self._shape_ = shape
        self._agents = agents
        self._owned = owned
        self._command = command  # what its procs run (None: forks of the fork server)
        self._stream_logs = bool(config.get("enable_log_forwarding"))
        # set by group_by: the label dims, and each host's values of them (by global rank)
        self._host_labels: tuple[tuple[str, ...], dict[int, dict[str, str]]] = ((), {})

    @property
    def region(self) -> Shape:
        """Where these hosts sit in the host mesh they were sliced from: labels over a
        strided slice of its ranks (Monarch's ``Region`` is the same pair)."""
        return self._shape_

    @property
    def stream_logs(self) -> bool:
        """Whether procs spawned here forward their output to the controller
        (``enable_log_forwarding`` when the mesh was made)."""
        return self._stream_logs

    @property
    def is_fake_in_process(self) -> bool:
        """Whether the "hosts" are simulated inside this process: never in regency (every
        proc is a real process)."""
        return False

    @property
    def _shape(self) -> Shape:
        return self._shape_

    def _new_with_shape(self, shape: Shape) -> HostMesh:
        sliced = HostMesh(shape, self._agents, owned=False, command=self._command)
        sliced._host_labels = self._host_labels
        return sliced

    def with_python_executable(self, python_executable: str) -> HostMesh:
        """The same hosts, whose procs run ``python_executable`` (another virtual
        environment, say: regency must be installed there) instead of this interpreter.

        Such procs are started by ``exec`` (``default_bootstrap_cmd()`` with that program),
        not forked from the preloaded fork server, so they start slower.
        """
        if not isinstance(python_executable, str) or not python_executable:
            raise TypeError("with_python_executable needs the path of a Python executable, "
                            f"got {python_executable!r}")
        return HostMesh(self._shape_, self._agents, owned=False,
                        command=python_command(python_executable))

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
        bootstrap_command: BootstrapCommand | Callable[[Point], BootstrapCommand] | None = None,
    ) -> ProcMesh:
        """Start ``per_host`` procs on every host; returns the ProcMesh at once.

        The mesh's dimensions are the host dimensions followed by ``per_host``'s. Each proc
        starts from the fork server with the caller's *current* environment, working
        directory and ``sys.path``; ``bootstrap`` runs in each before any actor.
        ``bootstrap_command`` (one ``BootstrapCommand``, or a function of each proc's
        ``Point`` returning one) makes the procs ``exec`` that program instead, as Monarch's
        does; see ``default_bootstrap_cmd()``. ``proc_bind``: one dict per proc of a host
        (in order of its ``per_host`` coordinates) of ``cpus``/``physcpubind``,
        ``cpunodebind`` and ``membind`` (lists such as ``"0-3,8"``): the proc pins itself to
        those CPUs and NUMA nodes before anything else runs in it; or ``"spread"`` (a
        regency extension): each proc of a host takes an equal share of the CPUs there,
        NUMA node after NUMA node (and its node's memory where its share lies in one).
        """
        if per_host is not None and not isinstance(per_host, Mapping):
            raise TypeError(f"spawn_procs: per_host must be a dict of dimension sizes, such as "
                            f"{{'gpus': {per_host!r}}}, not {type(per_host).__name__} "
                            f"({per_host!r})")
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
                                 tuple(self._shape_.extent.sizes) + tuple(per_host.values()))
        n_local = 1
        for size in per_host.values():
            n_local *= size
        binds = _procbind.check(proc_bind, n_local) if proc_bind is not None else None
        addrs: list[str] = []
        agents: list[str] = []
        requests: dict[str, list[dict[str, Any]]] = {}
        entries: dict[int, dict[str, Any]] = {}
        for h, hg in enumerate(self._shape_.ranks()):
            agent = self._agents[hg]
            for i in range(n_local):
                rank = h * n_local + i
                addr = _proc_address(rt.job, uid, rank, agent)
                addrs.append(addr)
                agents.append(agent)
                entry = {"addr": addr, "rank": rank, "label": f"{name} {dict(shape.point(rank))}"}
                command = self._command_for(bootstrap_command, shape.point(rank))
                if command is not None:
                    entry["command"] = command
                if binds is not None and binds[i]:
                    entry["proc_bind"] = binds[i]
                requests.setdefault(agent, []).append(entry)
                own = {k: v for k, v in entry.items() if k in ("command", "proc_bind")}
                if own:
                    entries[rank] = own
        st = _state(uid, len(addrs))
        record = ProcMeshRecord(st, addrs, agents, _owner_uid(), name, shape, entries=entries)
        api_state(rt).proc_meshes[uid] = record
        spec = {"job": rt.job, "root": rt.root, "mesh_uid": uid,
                "mesh_name": name, "shape": shape, "proc_addrs": tuple(addrs),
                "host_agents": tuple(agents),
                "bootstrap": _pickled(bootstrap), "config": config.get_runtime_config(),
                "order_output": bool(config.get("order_output")),  # set by env here, too
                "kill_descendants": bool(config.get("kill_proc_descendants")),
                "root_addresses": sorted(_root_addresses(rt)),  # where output marks end
                "script": script() or ""}  # where <dynamic-code> comes from
        record.spec = spec
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

    def _command_for(self, given: Any, point: Point) -> BootstrapCommand | None:
        """The bootstrap command of the proc at ``point`` (None: a fork)."""
        command = given(point) if callable(given) else given
        if command is None:
            return self._command
        if not isinstance(command, BootstrapCommand):
            raise TypeError("bootstrap_command must be a BootstrapCommand (see "
                            "default_bootstrap_cmd()) or a function of a Point returning one, "
                            f"got {command!r}")
        return command
    async def sync_workspace(self, workspace: Workspace, conda: bool = False,
                             auto_reload: bool = False) -> dict[str, Any]:
        """Copy ``workspace``'s local directories to every host, sending only changed files
        (content-hashed), over the job's own connections; awaitable, as in Monarch.

        ``auto_reload`` reloads the modules of changed files in every proc this process
        spawned on these hosts. Returns what was sent (see ``_sync``). Example::

            report = await hosts.sync_workspace(Workspace(dirs=["src"]), auto_reload=True)

        Raises:
            NotImplementedError: ``conda=True`` (syncing a conda environment).
            ValueError: a directory of the workspace does not exist.
        """
        if conda:
            raise NotImplementedError("sync_workspace(conda=True): regency syncs directories "
                                      "only; install the environment on the hosts")
        return await _sync_workspace(self, workspace, auto_reload, self._procs_here())

    def _procs_here(self) -> list[ProcMesh]:
        """The live proc meshes this process spawned on these hosts."""
        agents = {self._agents[g] for g in self._shape_.ranks()}
        out = []
        for uid, rec in api_state(runtime()).proc_meshes.items():
            if rec.state.stopped or not agents.intersection(rec.agents):
                continue
            out.append(ProcMesh(uid, rec.name, rec.shape, tuple(rec.addr_list),
                                tuple(rec.agents)))
        return out

    def topology(self, timeout: float = 10.0) -> Topology:
        """What each host is made of, by rank (a regency extension): its CPUs that procs
        may use, NUMA nodes, GPUs on the PCI bus, and the labels its operator gave it
        (``REGENCY_HOST_LABELS="rack=r1"`` in its environment, or ``regency worker
        --label rack=r1``). ``str()`` shows a table. Example::

            print(hosts.topology())
            by_rack = hosts.group_by("rack")          # 8 hosts in 2 racks: {rack: 2, hosts: 4}

        Raises:
            RuntimeError: a host did not answer within ``timeout`` (each is named).
            ValueError: a host's labels are malformed, or ``timeout`` is not positive.
        """
        if not float(timeout) > 0:
            raise ValueError(f"topology: timeout must be > 0 seconds, got {timeout!r}")
        return _topology.ask_hosts(runtime(), self._agents, self._shape_, float(timeout))

    def group_by(self, *labels: str, timeout: float = 10.0) -> HostMesh:
        """These hosts arranged by the values of host labels (a regency extension): dims
        ``labels`` then ``hosts``, e.g. ``hosts.group_by("rack")`` is ``{rack: 2, hosts:
        4}`` for 8 hosts in 2 racks. Values are in natural order (``r2`` before ``r10``);
        ``label_values`` of the result says which value each index is. Slice it by index
        (``slice(rack=1)``) or spawn procs on it, as on any host mesh. Within a group,
        hosts keep their order. It is a reference: ``stop()`` and ``shutdown()`` on it
        raise ``RuntimeError``; call them on the mesh it was grouped from.

        Raises:
            ValueError: a host lacks a label, the groups differ in size, a combination of
                values is missing, or a label is named ``hosts``.
            TypeError: a label is not a str.
        """
        bad = [label for label in labels if not isinstance(label, str)]
        if bad:
            raise TypeError(f"group_by takes label names as separate str arguments "
                            f"(group_by('rack', 'row')), got {bad[0]!r}")
        if "hosts" in labels or len(set(labels)) != len(labels):
            raise ValueError(f"group_by{labels}: labels must be distinct and not 'hosts' "
                             "(the last dimension's name)")
        topo = self.topology(timeout)
        sizes, order, _ = _topology.group_order([h.labels for h in topo], labels)
        ranks = self._shape_.ranks()
        agents = tuple(self._agents[ranks[i]] for i in order)
        grouped = HostMesh(Shape.from_sizes([*labels, "hosts"], sizes), agents, owned=False,
                           command=self._command)
        grouped._host_labels = (tuple(labels), {g: {k: topo[i].labels[k] for k in labels}
                                                for g, i in enumerate(order)})
        return grouped

    @property
    def label_values(self) -> dict[str, list[str]]:
        """For a mesh made by ``group_by`` (or a slice of one): each label dimension's
        values, by index."""
        keys, by_host = self._host_labels
        out: dict[str, list[str]] = {}
        for key in (k for k in keys if k in self._shape_.labels):
            values = [""] * self.sizes[key]
            for local, g in enumerate(self._shape_.ranks()):
                values[self._shape_.point(local)[key]] = by_host[g][key]
            out[key] = values
        return out

    def detached_procs(self) -> list[str]:
        """The names of the proc meshes that controllers detached on these hosts and that
        their workers keep for the next one, one per mesh (a name twice: two meshes; a
        regency extension, see ``ProcMesh.detach``).

        Raises:
            ValueError: this is this controller's own host (nothing is kept there).
            RuntimeError: the workers are not attached to this controller (released).
        """
        agents = self._remote_agents("detached_procs")
        kept = {e["uid"]: e["name"] for e in _reattach.kept_meshes(runtime(), agents)}
        return sorted(kept.values())

    def reattach_procs(self, name: str) -> ProcMesh:
        """Take over the proc mesh named ``name`` (or by its uid) that an earlier controller
        detached on these hosts (a regency extension; see ``ProcMesh.detach``).

        Its procs and actors run on with their state; this controller is their root and
        owner from now on, so their failures reach it, and the mesh ends with it unless
        it is detached again. ``procs.actor_meshes()`` gives its actor meshes. Ranks that
        died in between, and live procs that do not answer the takeover within
        ``connect_timeout``, fail through supervision now, with the cause their host saw
        (respawn them with ``procs.respawn()``). An actor mesh whose class does not load
        here is not adopted (a ``RuntimeWarning`` says which).

        Raises:
            ValueError: no kept mesh of that name (the message lists those kept), several
                (pass the uid), procs on hosts outside this host mesh, a host mesh of
                this controller's own host, or a mesh this controller handed over.
            RuntimeError: the workers are not attached to this controller (released).
            TransportError: no worker of the mesh could hand it over.
        """
        if not isinstance(name, str):
            raise TypeError(f"reattach_procs needs the mesh's name, got {name!r}")
        agents = self._remote_agents("reattach_procs")
        record = _reattach.reattach(runtime(), agents, name)
        return ProcMesh(record.uid, record.name, record.shape, record.addrs, record.agents)

    def _remote_agents(self, what: str) -> tuple[str, ...]:
        """The worker agents of these hosts (ValueError for this controller's own host)."""
        agents = tuple(dict.fromkeys(self._agents[g] for g in self._shape_.ranks()))
        rt = runtime()
        if _reattach.local_agents(rt, agents):
            raise ValueError(f"{what}: this host mesh holds this controller's own host, where "
                             "no proc outlives its controller; use the worker hosts (a job's "
                             "host mesh, or attach_to_workers)")
        gone = [a for a in agents if a not in api_state(rt).heartbeats]
        if gone:
            raise RuntimeError(f"{what}: worker(s) {', '.join(gone)} are not attached to this "
                               "controller (released by hosts.stop(), or lost); attach to "
                               "them again (job.state() or attach_to_workers)")
        return agents

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
        if not exit:  # the detached meshes there are the next controller's now
            _reattach.hand_over(rt, remote)
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
        return (HostMesh, (self._shape_, self._agents, False, self._command))

    def __repr__(self) -> str:
        return f"<HostMesh {self._shape_.extent}>"


def _root_addresses(rt: Runtime) -> set[str]:
    """Every address the controller answers to (its tcp one once it attached workers)."""
    if rt.role == "controller":
        return {rt.root, *rt.my_addresses}
    return {rt.root, *rt.root_addresses}


def proc_mesh_of(rt: Runtime) -> ProcMesh:
    """The proc of ``rt``, as a 0-dimensional ProcMesh."""
    return ProcMesh(rt.proc_uid, "root", Shape.unity(), (rt.address,), (rt.host_agent,))


def this_proc() -> ProcMesh:
    """The proc this code runs in, as a 0-dimensional ProcMesh.

    On the controller, actors spawned on it run inside the controller's own process.
    The same object each time, as Monarch's.
    """
    rt = runtime()
    state = api_state(rt)
    here = state.this_proc
    if here is None or here._addrs_made != (rt.address,) or here._uid != rt.proc_uid:
        here = state.this_proc = proc_mesh_of(rt)
    return here


def this_host() -> HostMesh:
    """This machine, as a 0-dimensional HostMesh (a reference: it cannot be shut down)."""
    rt = runtime()
    agent = rt.agent
    if agent is not None:
        rt.call_soon(agent.start_zygote)  # warm the fork server before the first spawn
    return HostMesh(Shape.unity(), (rt.host_agent,), owned=False)
