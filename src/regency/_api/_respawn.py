"""Elastic meshes: respawn the dead ranks of a proc mesh in place.

Theory of operation
-------------------
A rank whose proc died (killed, crashed, OOM) is lost for good in Monarch and in every
system we compared: its mesh must be rebuilt. ``procs.respawn()`` instead starts a new proc
for each dead rank, on the same host, with the same coordinates and the same proc spec
(environment, bootstrap), and rebuilds there every actor mesh this process spawned on those
procs, with the constructor arguments it was spawned with (kept from the spawn). Then:

* addresses are never reused, so the new proc has a new one; :mod:`._incarnation` maps the
  old address to it, and every mesh object of this process (the proc mesh, its actor meshes,
  their slices) routes to the new proc from then on;
* supervision hears :class:`~regency._supervision.RankRespawned`: the rank is RUNNING again
  and new calls to it are accepted. Calls that were in flight to the dead proc failed with
  ``SupervisionError`` when it died, as always;
* when every rebuilt actor has run ``__init__``, ``restore(members)`` (when given) runs on the
  caller's thread with ``{actor mesh name: that mesh sliced to the respawned ranks}``: the
  place to load a checkpoint or copy state from a peer.

Limits: only meshes this process spawned are rebuilt (actors spawned *by actors* on the dead
proc are not); a mesh that another process received before the respawn still names the dead
proc there; actor meshes larger than ``max_cast_fanout`` relay casts through procs and are
refused (their relay trees would still name the dead proc).
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .. import config
from .._runtime._completion import Completion
from .._wire import _messages as m
from ..errors import SupervisionError
from . import _incarnation, _reattach
from ._actor_mesh import ActorMesh
from ._future import Future
from ._mesh_state import _proc_address, countdown_port
from ._process import runtime
from ._state import api_state, supervisor

if TYPE_CHECKING:
    from ._proc_mesh import ProcMesh

__all__ = ["respawn"]


def respawn(procs: ProcMesh, ranks: Iterable[int | Mapping[str, int]] | None = None, *,
            restore: Callable[[dict[str, int], dict[str, ActorMesh]], Any] | None = None,
            timeout: float = 60.0) -> list[int]:
    """Respawn dead ranks of ``procs`` in place (see the module docstring); blocks.

    Returns the global ranks respawned (empty when none was dead).

    Raises:
        ValueError: a rank given is not in this mesh, or its proc is alive.
        RuntimeError: the mesh was not spawned by this process, or was stopped.
        NotImplementedError: an actor mesh on it relays casts (more than max_cast_fanout).
        SupervisionError: a new proc or actor did not come up within ``timeout``.
    """
    rt = runtime()
    api = api_state(rt)
    record = api.proc_meshes.get(procs._uid)
    if record is None or record.spec is None:
        raise RuntimeError(f"respawn: proc mesh {procs._uid} was not spawned by this process; "
                           "only its owner can respawn its ranks")
    if record.state.stopped:
        raise RuntimeError(f"respawn: proc mesh {procs._uid} was stopped ({record.state.stopped})")
    chosen = _chosen_ranks(procs, ranks)
    dead = [g for g in chosen if procs._proc_addrs[g] in rt.dead_addrs]
    if ranks is not None and len(dead) != len(chosen):
        alive = sorted(set(chosen) - set(dead))
        raise ValueError(f"respawn: rank(s) {alive} of {procs._uid} are alive; only dead procs "
                         "are replaced")
    if not dead:
        return []
    meshes = _actor_meshes_on(procs, dead)
    new = {g: _new_address(rt.job, procs, record, g) for g in dead}
    _start_procs(procs, record, new)
    done = Completion(f"respawned rank(s) {dead} of {procs._uid} to rebuild their actors")
    port = countdown_port(len(meshes) * len(dead), done)
    for g, addr in new.items():
        old = procs._proc_addrs[g]
        _incarnation.replace(old, addr)
        record.addr_list[g] = addr
        supervisor(rt).respawned(old, addr)
    if record.detached:  # its workers keep the new procs instead of the dead ones
        _reattach.send_mesh(rt, procs._uid)
    for payload in meshes.values():
        msg = replace(payload, proc_addrs=_incarnation.current(payload.proc_addrs), ack=port)
        for g in dead:
            rt.send_sys(new[g], msg)
    try:
        Future._from(done).get(timeout=timeout)
    except TimeoutError:
        raise SupervisionError(f"respawn of rank(s) {dead} of {procs._uid}: the new procs "
                               f"{sorted(new.values())} did not rebuild their actors within "
                               f"{timeout}s") from None
    if restore is not None:
        for g in dead:
            point = dict(procs._shape.point(procs._shape.local_rank(g)))
            restore(point, _members(meshes, g))
    return dead


def _chosen_ranks(procs: ProcMesh, ranks: Iterable[int | Mapping[str, int]] | None
                  ) -> list[int]:
    """Global ranks of ``procs`` from local ranks or points (all of them when None)."""
    shape = procs._shape
    if ranks is None:
        return list(shape.ranks())
    points = [dict(shape.point(i)) for i in range(len(shape))]
    out = []
    for r in ranks:
        if isinstance(r, Mapping):
            want = {k: int(v) for k, v in r.items()}
            local = next((i for i, p in enumerate(points) if p == want), -1)
            if local < 0:
                raise ValueError(f"respawn: {want} is not a point of {dict(shape.extent)}")
        else:
            local = int(r)
            if not 0 <= local < len(shape):
                raise ValueError(f"respawn: rank {r} is not in this mesh of {len(shape)} procs")
        out.append(shape.global_rank(local))
    return out


def _actor_meshes_on(procs: ProcMesh, ranks: list[int]) -> dict[str, m.SpawnActor]:
    """The actor meshes spawned here whose members lived on ``ranks`` of ``procs``."""
    rt = runtime()
    fanout = int(config.get("max_cast_fanout"))
    stopped = rt.verdicts.stopped if rt.verdicts is not None else {}
    out: dict[str, m.SpawnActor] = {}
    for uid, payload in api_state(rt).spawned.items():
        pm = payload.proc_mesh
        if pm is None or pm._uid != procs._uid or uid in stopped:
            continue
        members = set(payload.shape.ranks())
        if not members.intersection(ranks):
            continue
        if len(payload.shape) > fanout:
            raise NotImplementedError(
                f"respawn: actor mesh {uid} has {len(payload.shape)} members, more than "
                f"max_cast_fanout ({fanout}): its casts are relayed by procs, which would "
                "still name the dead proc")
        out[uid] = payload
    return out


def _new_address(job: str, procs: ProcMesh, record: Any, g: int) -> str:
    n = record.incarnations[g] = record.incarnations.get(g, 0) + 1
    return _proc_address(job, f"{procs._uid}i{n}", g, record.agents[g])


def _start_procs(procs: ProcMesh, record: Any, new: dict[int, str]) -> None:
    rt = runtime()
    spec = dict(record.spec)
    addrs = list(_incarnation.current(tuple(record.spec["proc_addrs"])))
    for g, addr in new.items():
        addrs[g] = addr
    spec["proc_addrs"] = tuple(addrs)
    by_agent: dict[str, list[dict[str, Any]]] = {}
    for g, addr in new.items():
        label = f"{record.name} {dict(record.shape.point(g))} (respawned)"
        by_agent.setdefault(record.agents[g], []).append(
            {**record.entries.get(g, {}), "addr": addr, "rank": g, "label": label})
    for agent, entries in by_agent.items():
        if agent in rt.my_addresses:
            msg = m.SpawnProcs(entries, spec, rt.contact, procs._uid, dict(os.environ),
                               os.getcwd(), list(sys.path))
        else:
            msg = m.SpawnProcs(entries, spec, rt.contact, procs._uid)
        rt.send_sys(agent, msg)


def _members(meshes: dict[str, m.SpawnActor], g: int) -> dict[str, ActorMesh]:
    """Each rebuilt actor mesh, sliced to its member on global rank ``g``."""
    out: dict[str, ActorMesh] = {}
    for uid, payload in meshes.items():
        cls, _args, _kwargs = pickle.loads(payload.body)
        shape = payload.shape
        whole = ActorMesh(uid, payload.name, cls, shape, payload.proc_addrs, shape,
                          payload.fanout)
        out[payload.name] = whole.slice(**dict(shape.point(shape.local_rank(g))))
    return out
