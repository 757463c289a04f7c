"""Detaching a proc mesh from this controller, and reattaching one a controller detached.

``ProcMesh.detach()`` sends each worker of the mesh a ``MeshRecord``: what a later
controller needs to take the mesh over (its shape, addresses, proc spec, and the actor
meshes this controller spawned there, with their classes). The workers keep the procs when
this controller ends (``_kept``). ``HostMesh.reattach_procs(name)`` in another controller
reads the records back, makes the books this controller would have made had it spawned the
mesh (supervision, respawn), takes the procs over at each worker and tells each proc its new
root (``Adopt``). Ranks that died in between fail through supervision then, with the cause
their host recorded.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

import cloudpickle

from .. import config
from .._mesh import Shape
from .._runtime._runtime import Runtime
from .._wire import _messages as m
from ._leases import ask
from ._mesh_state import _state
from ._state import OwnedMesh, ProcMeshRecord, api_state, supervisor

__all__ = ["MeshRecord", "detach", "kept_meshes", "reattach", "send_record"]


@dataclass
class MeshRecord:
    """A detached proc mesh, as its controller hands it to the next one (pickled)."""

    uid: str
    name: str
    shape: Shape
    addrs: tuple[str, ...]  # by rank: each proc's current address
    agents: tuple[str, ...]  # by rank: its host agent
    spec: dict[str, Any]
    entries: dict[int, dict[str, Any]]
    actors: list[m.SpawnActor]  # the live actor meshes spawned on it, as spawned
    classes: dict[str, Any]  # actor mesh uid -> its class


def detach(rt: Runtime, uid: str, what: str) -> None:
    """Keep proc mesh ``uid`` running when this controller ends (blocks until every worker
    of the mesh said so)."""
    record = api_state(rt).proc_meshes.get(uid)
    if record is None or record.owner_uid is not None or rt.role != "controller":
        raise RuntimeError(
            f"detach: {what} was not spawned by this controller (actors' proc meshes end "
            "with their actors); only the controller that spawned or reattached a mesh "
            "detaches it")
    if record.state.stopped:
        raise RuntimeError(f"detach: {what} was stopped ({record.state.stopped})")
    local = sorted({a for a in record.agents if a in rt.my_addresses or
                    not a.startswith("tcp:")})
    if local:
        raise ValueError(
            f"detach: {what} has procs on this controller's own host ({', '.join(local)}), "
            "which end with this controller; spawn it on worker hosts (a job's host mesh, "
            "or attach_to_workers) to keep it beyond this controller")
    record.detached = True
    send_record(rt, uid, wait=True)


def send_record(rt: Runtime, uid: str, wait: bool) -> None:
    """Send proc mesh ``uid``'s record to its workers (again: after a spawn on it or a
    respawn of its ranks); with ``wait``, until each answered."""
    record = api_state(rt).proc_meshes[uid]
    data = cloudpickle.dumps(_record_of(rt, uid, record))
    by_agent: dict[str, list[str]] = {}
    for addr, agent in zip(record.addr_list, record.agents):
        by_agent.setdefault(agent, []).append(addr)
    timeout = float(config.get("connect_timeout"))

    async def keep(agent: str, addrs: list[str]) -> None:
        await ask(rt, agent, lambda port, me: m.KeepProcs(port, me, uid, record.name, addrs,
                                                          data), timeout)

    async def all_kept() -> None:
        await asyncio.gather(*(keep(a, addrs) for a, addrs in by_agent.items()))

    if wait:
        rt.run_sync(all_kept, timeout=timeout + 5)
    else:
        rt.call_soon(lambda: rt.background.add(rt.loop.create_task(all_kept())))


def _record_of(rt: Runtime, uid: str, record: ProcMeshRecord) -> MeshRecord:
    api = api_state(rt)
    actors = [p for p in api.spawned.values() if p.proc_mesh._uid == uid]
    classes = {p.uid: api.owned[p.uid].cls for p in actors if p.uid in api.owned}
    assert record.spec is not None
    return MeshRecord(uid, record.name, record.shape, tuple(record.addr_list),
                      tuple(record.agents), record.spec, dict(record.entries), actors, classes)


def kept_meshes(rt: Runtime, agents: tuple[str, ...]) -> list[dict[str, Any]]:
    """What each of ``agents`` keeps: one entry per (worker, detached mesh)."""
    timeout = float(config.get("connect_timeout"))

    async def one(agent: str) -> list[dict[str, Any]]:
        listing = await ask(rt, agent, lambda port, me: m.ListKept(port, me), timeout)
        return [{**entry, "agent": agent} for entry in listing]

    async def every() -> list[list[dict[str, Any]]]:
        return list(await asyncio.gather(*(one(a) for a in agents)))

    return [e for listing in rt.run_sync(every, timeout=timeout + 5) for e in listing]


def reattach(rt: Runtime, agents: tuple[str, ...], name: str
             ) -> tuple[MeshRecord, dict[str, type]]:
    """Take over the kept proc mesh named ``name`` (or with that uid) on ``agents``; returns
    its record and the classes of its live actor meshes, by uid."""
    entries = _entries_of(rt, agents, name)
    record: MeshRecord = cloudpickle.loads(entries[0]["record"])
    missing = sorted(set(record.agents) - {e["agent"] for e in entries})
    if missing:
        raise ValueError(
            f"reattach_procs({name!r}): the mesh also has procs on {', '.join(missing)}, "
            "which this host mesh does not hold (or which no longer keep it); reattach "
            "through a host mesh of all its hosts")
    _make_books(rt, record)
    timeout = float(config.get("connect_timeout"))
    live = [a for e in entries for a in e["live"]]

    async def take_over() -> list[Any]:
        await asyncio.gather(*(ask(rt, e["agent"], lambda port, me: m.Reattach(
            port, me, record.uid), timeout) for e in entries))
        roots = sorted({rt.root, *rt.my_addresses})
        old = sorted(set(record.spec.get("root_addresses", ())) | {
            p.owner for p in record.actors} | {str(record.spec.get("root"))})
        asks = [ask(rt, addr, lambda port, me: m.Adopt(port, me, rt.root, roots, old),
                    timeout) for addr in live]
        return list(await asyncio.gather(*asks, return_exceptions=True))

    answers = rt.run_sync(take_over, timeout=timeout + 5)
    living = [set(a) for a in answers if isinstance(a, list)]
    alive = set.intersection(*living) if living else set()
    for payload in record.actors:
        if payload.uid not in alive:  # stopped since the record was sent: not adopted
            _forget_actor_mesh(rt, payload.uid)
    classes = {uid: cls for uid, cls in record.classes.items() if uid in alive}
    return record, classes


def _forget_actor_mesh(rt: Runtime, uid: str) -> None:
    api = api_state(rt)
    api.spawned.pop(uid, None)
    api.owned.pop(uid, None)
    supervisor(rt).mesh_stopped(uid, "stopped before this controller reattached its procs")


def _entries_of(rt: Runtime, agents: tuple[str, ...], name: str) -> list[dict[str, Any]]:
    """The workers' entries of the one kept mesh named ``name`` (or of uid ``name``)."""
    listing = kept_meshes(rt, agents)
    uids = sorted({e["uid"] for e in listing if name in (e["name"], e["uid"])})
    if not uids:
        there = sorted({f"{e['name']} ({e['uid']})" for e in listing}) or ["none"]
        raise ValueError(f"reattach_procs({name!r}): these hosts keep no detached proc mesh "
                         f"of that name; they keep: {', '.join(there)}")
    if len(uids) > 1:
        raise ValueError(f"reattach_procs({name!r}): these hosts keep several detached proc "
                         f"meshes of that name: {', '.join(uids)}; pass the one to reattach")
    return [e for e in listing if e["uid"] == uids[0]]


def _make_books(rt: Runtime, record: MeshRecord) -> None:
    """The books this controller keeps of a mesh it spawned, made for a reattached one."""
    api = api_state(rt)
    roots = sorted({rt.root, *rt.my_addresses})
    spec = {**record.spec, "root": rt.root, "root_addresses": roots}
    api.proc_meshes[record.uid] = ProcMeshRecord(
        _state(record.uid), list(record.addrs), list(record.agents), None, record.name,
        record.shape, spec, dict(record.entries))
    supervisor(rt).mesh_spawned(record.uid, None, "proc", record.name, record.shape,
                                record.addrs)
    for payload in record.actors:
        payload = replace(payload, owner=rt.contact, owner_uid=None, proc_addrs=record.addrs)
        api.spawned[payload.uid] = payload
        api.owned[payload.uid] = OwnedMesh(payload.uid, payload.class_name, payload.shape,
                                           record.addrs, None, record.classes.get(payload.uid))
        _state(payload.uid)
        supervisor(rt).mesh_spawned(payload.uid, None, "actor", payload.name, payload.shape,
                                    record.addrs, payload.class_name)
