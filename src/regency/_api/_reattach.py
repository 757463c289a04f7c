"""Detaching a proc mesh from this controller, and reattaching one a controller detached.

``ProcMesh.detach()`` sends each worker of the mesh a ``MeshRecord``: what a later
controller needs to take the mesh over (its shape, addresses, proc spec, and the actor
meshes this controller spawned there, with their classes). The workers keep the procs when
this controller ends (``_kept``). ``HostMesh.reattach_procs(name)`` in another controller
reads the records back, makes the books this controller would have made had it spawned the
mesh (supervision, respawn), takes the procs over at each worker and tells each proc its new
root (``Adopt``). Ranks that died in between fail through supervision then, with the cause
their host recorded; a proc that does not answer the takeover is failed the same way.
"""

from __future__ import annotations

import asyncio
import warnings
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

__all__ = ["MeshRecord", "detach", "forget", "hand_over", "kept_meshes", "reattach",
           "send_record"]


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
    classes: dict[str, bytes]  # actor mesh uid -> its class, pickled on its own


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
    send_record(rt, uid)


def send_record(rt: Runtime, uid: str) -> None:
    """Send proc mesh ``uid``'s record to its workers (again after a spawn on it or a
    respawn of its ranks), until each answered."""
    record = api_state(rt).proc_meshes[uid]
    data = cloudpickle.dumps(_record_of(rt, uid, record))
    _keep(rt, uid, record, _by_agent(record), data)


def forget(rt: Runtime, uid: str) -> None:
    """Proc mesh ``uid`` was stopped by this controller: its workers keep nothing of it."""
    record = api_state(rt).proc_meshes[uid]
    _keep(rt, uid, record, {a: [] for a in record.agents}, b"")


def _by_agent(record: ProcMeshRecord) -> dict[str, list[str]]:
    by_agent: dict[str, list[str]] = {}
    for addr, agent in zip(record.addr_list, record.agents):
        by_agent.setdefault(agent, []).append(addr)
    return by_agent


def _keep(rt: Runtime, uid: str, record: ProcMeshRecord, by_agent: dict[str, list[str]],
          data: bytes) -> None:
    timeout = float(config.get("connect_timeout"))

    async def keep(agent: str, addrs: list[str]) -> None:
        await ask(rt, agent, lambda port, me: m.KeepProcs(port, me, uid, record.name, addrs,
                                                          data), timeout)

    async def all_kept() -> None:
        await asyncio.gather(*(keep(a, addrs) for a, addrs in by_agent.items()))

    if not rt.on_loop():
        rt.run_sync(all_kept, timeout=timeout + 5)
        return
    task = rt.loop.create_task(all_kept())  # called on the loop (an async actor here)
    rt.background.add(task)
    task.add_done_callback(rt.background.discard)


def _record_of(rt: Runtime, uid: str, record: ProcMeshRecord) -> MeshRecord:
    api = api_state(rt)
    actors = [p for p in api.spawned.values() if p.proc_mesh._uid == uid]
    classes = {p.uid: cloudpickle.dumps(api.owned[p.uid].cls) for p in actors
               if p.uid in api.owned}
    assert record.spec is not None
    return MeshRecord(uid, record.name, record.shape, tuple(record.addr_list),
                      tuple(record.agents), record.spec, dict(record.entries), actors, classes)


def hand_over(rt: Runtime, agents: tuple[str, ...]) -> None:
    """This controller released ``agents``: the detached meshes there are the next
    controller's, and this one no longer calls them (its calls are refused)."""
    sup = supervisor(rt)
    for uid, record in api_state(rt).proc_meshes.items():
        if record.detached and not record.state.stopped and set(record.agents) & set(agents):
            why = "detached and handed over: its hosts were released for the next controller"
            record.state.stopped = why
            sup.procs_stopped(uid, list(range(len(record.addr_list))),
                              len(record.addr_list), why)


def kept_meshes(rt: Runtime, agents: tuple[str, ...]) -> list[dict[str, Any]]:
    """What each of ``agents`` keeps: one entry per (worker, detached mesh), of meshes with
    a proc still running or a failure to tell (not those stopped by their controller)."""
    timeout = float(config.get("connect_timeout"))

    async def one(agent: str) -> list[dict[str, Any]]:
        listing = await ask(rt, agent, lambda port, me: m.ListKept(port, me), timeout)
        return [{**entry, "agent": agent} for entry in listing]

    async def every() -> list[list[dict[str, Any]]]:
        return list(await asyncio.gather(*(one(a) for a in agents)))

    entries = [e for listing in rt.run_sync(every, timeout=timeout + 5) for e in listing]
    worth = {e["uid"] for e in entries if e["live"] or e["failed"]}
    return [e for e in entries if e["uid"] in worth]


def reattach(rt: Runtime, agents: tuple[str, ...], name: str) -> MeshRecord:
    """Take over the kept proc mesh named ``name`` (or with that uid) on ``agents``; returns
    its record."""
    entries = _entries_of(rt, agents, name)
    uid = entries[0]["uid"]
    held = api_state(rt).proc_meshes.get(uid)
    if held is not None and not held.state.stopped:
        raise ValueError(f"reattach_procs({name!r}): this controller holds mesh {uid} already")
    try:
        record: MeshRecord = cloudpickle.loads(entries[0]["record"])
    except Exception as exc:
        raise RuntimeError(f"reattach_procs({name!r}): the record of mesh {uid} does not load "
                           f"here ({type(exc).__name__}: {exc})") from exc
    missing = sorted(set(record.agents) - {e["agent"] for e in entries})
    if missing:
        raise ValueError(
            f"reattach_procs({name!r}): the mesh also has procs on {', '.join(missing)}, "
            "which this host mesh does not hold; reattach through a host mesh of all its "
            "hosts")
    classes = _load_classes(record, name)
    _make_books(rt, record, classes)
    try:
        answers = rt.run_sync(lambda: _take_over(rt, record, entries),
                              timeout=float(config.get("connect_timeout")) * 2 + 5)
    except BaseException:
        _unmake_books(rt, record)
        raise
    _settle_actor_meshes(rt, record, answers)
    return record


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
                         f"meshes of that name: {', '.join(uids)}; pass the uid of the one "
                         f"to reattach, e.g. reattach_procs({uids[0]!r})")
    return [e for e in listing if e["uid"] == uids[0]]


def _load_classes(record: MeshRecord, name: str) -> dict[str, type]:
    """The actor classes of the record that load here; a warning for each that does not
    (its actor mesh is not adopted: no mesh object can be made without its class)."""
    classes: dict[str, type] = {}
    for payload in record.actors:
        try:
            classes[payload.uid] = cloudpickle.loads(record.classes[payload.uid])
        except Exception as exc:  # noqa: BLE001 - any import or unpickling error
            warnings.warn(
                f"reattach_procs({name!r}): actor mesh {payload.name!r} is not adopted: its "
                f"class {payload.class_name} does not load in this controller "
                f"({type(exc).__name__}: {exc}); make it importable here (same modules "
                "and sys.path as the controller that spawned it)", RuntimeWarning,
                stacklevel=4)
    record.actors = [p for p in record.actors if p.uid in classes]
    return classes


def _make_books(rt: Runtime, record: MeshRecord, classes: dict[str, type]) -> None:
    """The books this controller keeps of a mesh it spawned, made for a reattached one."""
    api = api_state(rt)
    roots = sorted({rt.root, *rt.my_addresses})
    spec = {**record.spec, "root": rt.root, "root_addresses": roots,  # respawns are ours
            "config": config.get_runtime_config(),
            "order_output": bool(config.get("order_output")),
            "kill_descendants": bool(config.get("kill_proc_descendants"))}
    api.proc_meshes[record.uid] = ProcMeshRecord(
        _state(record.uid), list(record.addrs), list(record.agents), None, record.name,
        record.shape, spec, dict(record.entries))
    supervisor(rt).mesh_spawned(record.uid, None, "proc", record.name, record.shape,
                                record.addrs)
    for payload in record.actors:
        payload = replace(payload, owner=rt.contact, owner_uid=None, proc_addrs=record.addrs)
        api.spawned[payload.uid] = payload
        api.owned[payload.uid] = OwnedMesh(payload.uid, payload.class_name, payload.shape,
                                           record.addrs, None, classes[payload.uid])
        _state(payload.uid)
        supervisor(rt).mesh_spawned(payload.uid, None, "actor", payload.name, payload.shape,
                                    record.addrs, payload.class_name)


def _unmake_books(rt: Runtime, record: MeshRecord) -> None:
    """A takeover that failed: this controller keeps nothing of the mesh."""
    api = api_state(rt)
    api.proc_meshes.pop(record.uid, None)
    for payload in record.actors:
        api.spawned.pop(payload.uid, None)
        api.owned.pop(payload.uid, None)


async def _take_over(rt: Runtime, record: MeshRecord, entries: list[dict[str, Any]]
                     ) -> dict[str, dict[str, list[str]]]:
    """Take the procs over at each worker, then tell each live proc; returns each
    answering proc's actor meshes by state. A live proc that does not answer is failed."""
    timeout = float(config.get("connect_timeout"))
    await asyncio.gather(*(ask(rt, e["agent"], lambda port, me: m.Reattach(
        port, me, record.uid), timeout) for e in entries))
    roots = sorted({rt.root, *rt.my_addresses})
    old = sorted(set(record.spec.get("root_addresses", ())) | {
        p.owner for p in record.actors} | {str(record.spec.get("root"))})
    live = [a for e in entries for a in e["live"]]
    asks = [ask(rt, addr, lambda port, me: m.Adopt(port, me, rt.root, roots, old), timeout)
            for addr in live]
    answers: dict[str, dict[str, list[str]]] = {}
    for addr, answer in zip(live, await asyncio.gather(*asks, return_exceptions=True)):
        if isinstance(answer, dict):
            answers[addr] = answer
        else:
            _unanswered(rt, record, addr, answer)
    return answers


def _unanswered(rt: Runtime, record: MeshRecord, addr: str, exc: BaseException) -> None:
    """A live proc did not answer the takeover: it fails through supervision (it may be
    respawned) and is stopped, instead of running on with the old controller as its root."""
    rank = record.addrs.index(addr)
    agent = record.agents[rank]
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        timeout = float(config.get("connect_timeout"))
        why = f"did not answer this controller's takeover within {timeout:g}s"
    else:
        why = f"did not answer this controller's takeover ({type(exc).__name__}: {exc})"
    rt.dispatch(m.ProcExited(addr, None, why, False, record.uid, rank, agent, []))
    port_id = rt.open_port(lambda reply, frame: None)
    rt.send_sys(agent, m.StopProcs([addr], why, (rt.contact, port_id)))


def _settle_actor_meshes(rt: Runtime, record: MeshRecord,
                         answers: dict[str, dict[str, list[str]]]) -> None:
    """Actor meshes stopped since the record was sent are not adopted; ranks stopped
    since are stopped here too."""
    sup = supervisor(rt)
    for payload in record.actors:
        ranks = payload.shape.ranks()
        stopped = frozenset(g for g in ranks if record.addrs[g] in answers
                            and payload.uid not in answers[record.addrs[g]]["live"]
                            and payload.uid not in answers[record.addrs[g]]["failed"])
        why = "stopped before this controller reattached its procs"
        if stopped and len(stopped) == len(ranks):
            api = api_state(rt)
            api.spawned.pop(payload.uid, None)
            api.owned.pop(payload.uid, None)
            sup.mesh_stopped(payload.uid, why)
        elif stopped:
            sup.ranks_stopped(payload.uid, stopped, why)
