"""Detaching a proc mesh from this controller, and reattaching one a controller detached.

``ProcMesh.detach()`` sends each worker of the mesh the parts of a record: what a later
controller needs to take the mesh over (a ``MeshRecord``: shape, addresses, proc spec; an
``ActorRecord`` per actor mesh this controller spawned there, with its class). The workers
keep the procs when this controller ends (``_kept``). ``HostMesh.reattach_procs(name)`` in
another controller reads the records back, makes the books this controller would have made
had it spawned the mesh (supervision, respawn), takes the procs over at each worker and tells
each proc its new root (``Adopt``). Ranks that died in between fail through supervision
then, with the cause their host recorded; so do procs that do not answer the takeover, and
those of a worker that keeps nothing of the mesh any more (it never heard of the detach, or
a takeover there ended half way).
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Future as ThreadFuture
from dataclasses import dataclass, field, replace
from typing import Any

import cloudpickle

from .. import config
from .._mesh import Shape
from .._runtime._runtime import Runtime
from .._wire import _messages as m
from ..errors import TransportError
from ._leases import ask
from ._mesh_state import _state
from ._state import OwnedMesh, ProcMeshRecord, api_state, supervisor

__all__ = ["ActorRecord", "MeshRecord", "detach", "drop_actor", "forget", "hand_over",
           "kept_meshes", "local_agents", "reattach", "send_actor", "send_mesh", "sends_done"]

log = logging.getLogger("regency.detach")
_MESH = "mesh"  # the record's part that describes the proc mesh; actor meshes: "actor:UID"


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
    incarnations: dict[int, int] = field(default_factory=dict)  # rank -> respawns so far


@dataclass
class ActorRecord:
    """An actor mesh of a detached proc mesh: as it was spawned, and its class pickled on
    its own (a class that does not load leaves out its mesh, not the whole record)."""

    payload: m.SpawnActor
    cls: bytes


def detach(rt: Runtime, uid: str, what: str) -> None:
    """Keep proc mesh ``uid`` running when this controller ends (blocks until every worker
    of the mesh said so).

    Raises:
        TransportError: a worker could not be told (the message names it).
    """
    record = api_state(rt).proc_meshes.get(uid)
    if record is None or record.owner_uid is not None or rt.role != "controller":
        raise RuntimeError(
            f"detach: {what} was not spawned by this controller (actors' proc meshes end "
            "with their actors); only the controller that spawned or reattached a mesh "
            "detaches it")
    if record.state.stopped:
        raise RuntimeError(f"detach: {what} was stopped ({record.state.stopped})")
    local = local_agents(rt, record.agents)
    if local:
        raise ValueError(
            f"detach: {what} has procs on this controller's own host ({', '.join(local)}), "
            "which end with this controller; spawn it on worker hosts to keep it beyond "
            "this controller: a job's host mesh (on one machine: ProcessJob({'hosts': 1})"
            ".state().hosts) or attach_to_workers")
    api = api_state(rt)
    parts = {_MESH: _mesh_part(record, uid)}
    for payload in api.spawned.values():
        if payload.proc_mesh._uid == uid and payload.uid in api.owned:
            parts[f"actor:{payload.uid}"] = _actor_part(rt, payload)
    done = _keep(rt, uid, record, _by_agent(record), parts)
    try:
        done.result(float(config.get("connect_timeout")) + 5)
    except TransportError as exc:
        raise TransportError(f"detach: {what}: {exc}") from None
    record.detached = True


def local_agents(rt: Runtime, agents: Iterable[str]) -> list[str]:
    """Those of ``agents`` that run in this controller (``this_host()``): their procs end
    with it, and nothing is kept there."""
    return sorted({a for a in agents if a in rt.my_addresses or not a.startswith("tcp:")})


def send_mesh(rt: Runtime, uid: str) -> None:
    """Tell the workers of detached mesh ``uid`` its addresses again (a respawn changed
    them); not waited for: ``sends_done`` at shutdown."""
    record = api_state(rt).proc_meshes[uid]
    _keep(rt, uid, record, _by_agent(record), {_MESH: _mesh_part(record, uid)})


def send_actor(rt: Runtime, uid: str, payload: m.SpawnActor,
               then: Callable[[], Any] | None = None) -> None:
    """Tell the workers of detached mesh ``uid`` of an actor mesh spawned on it; ``then``
    runs on the loop once the messages to them are written (not answered)."""
    record = api_state(rt).proc_meshes[uid]
    _keep(rt, uid, record, _by_agent(record),
          {f"actor:{payload.uid}": _actor_part(rt, payload)}, then)


def drop_actor(rt: Runtime, payload: m.SpawnActor) -> None:
    """An actor mesh was stopped: if its proc mesh is detached, its workers drop its part
    (not waited for)."""
    uid = payload.proc_mesh._uid
    record = api_state(rt).proc_meshes.get(uid)
    if record is not None and record.detached and not record.state.stopped:
        _keep(rt, uid, record, _by_agent(record), {f"actor:{payload.uid}": b""})


def forget(rt: Runtime, uid: str) -> None:
    """Proc mesh ``uid`` was stopped by this controller: its workers keep nothing of it
    (not waited for; a worker that cannot be told has lost the procs anyway)."""
    record = api_state(rt).proc_meshes[uid]
    _keep(rt, uid, record, {a: [] for a in record.agents}, {})


def _mesh_part(record: ProcMeshRecord, uid: str) -> bytes:
    assert record.spec is not None
    return cloudpickle.dumps(MeshRecord(uid, record.name, record.shape,
                                        tuple(record.addr_list), tuple(record.agents),
                                        record.spec, dict(record.entries),
                                        dict(record.incarnations)))


def _actor_part(rt: Runtime, payload: m.SpawnActor) -> bytes:
    cls = api_state(rt).owned[payload.uid].cls
    return cloudpickle.dumps(ActorRecord(payload, cloudpickle.dumps(cls)))


def _by_agent(record: ProcMeshRecord) -> dict[str, list[str]]:
    by_agent: dict[str, list[str]] = {}
    for addr, agent in zip(record.addr_list, record.agents):
        by_agent.setdefault(agent, []).append(addr)
    return by_agent


def _keep(rt: Runtime, uid: str, record: ProcMeshRecord, by_agent: dict[str, list[str]],
          parts: dict[str, bytes], then: Callable[[], Any] | None = None
          ) -> ThreadFuture[None]:
    """Send ``KeepProcs`` to each worker (from any thread), then run ``then`` on the loop;
    the future completes when all answered, or fails naming the first that did not. Kept
    until shutdown (``sends_done``)."""
    timeout = float(config.get("connect_timeout"))

    async def keep(agent: str, addrs: list[str]) -> None:
        try:
            await ask(rt, agent, lambda port, me: m.KeepProcs(port, me, uid, record.name,
                                                              addrs, parts), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            raise TransportError(f"worker {agent} did not answer within {timeout:g}s") from None
        except Exception as exc:  # noqa: BLE001 - said with the worker's name
            raise TransportError(f"worker {agent} could not be told: {exc}") from None

    async def all_kept() -> None:
        asks = [asyncio.ensure_future(keep(a, addrs)) for a, addrs in by_agent.items()]
        if then is not None:
            await asyncio.sleep(0)  # each ask has sent its message
            then()
        await asyncio.gather(*asks)

    done = asyncio.run_coroutine_threadsafe(all_kept(), rt.loop)
    pending = api_state(rt).kept_sends
    pending.add(done)
    done.add_done_callback(lambda f: _sent(pending, f, record.name))
    return done


def _sent(pending: set[Any], done: ThreadFuture[None], name: str) -> None:
    pending.discard(done)
    if not done.cancelled() and done.exception() is not None:
        log.warning("regency: keeping detached proc mesh %s: %s", name, done.exception())


def sends_done(rt: Runtime, timeout: float) -> Awaitable[Any] | None:
    """What shutdown waits for (``timeout`` s at most): the workers' answers to the record
    parts sent without waiting (a spawn just before the end)."""
    pending = [asyncio.wrap_future(f) for f in api_state(rt).kept_sends]
    return asyncio.wait(pending, timeout=timeout) if pending else None


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
        try:
            listing = await ask(rt, agent, lambda port, me: m.ListKept(port, me), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            raise TransportError(f"worker {agent} did not answer within {timeout:g}s") from None
        return [{**entry, "agent": agent} for entry in listing]

    async def every() -> list[list[dict[str, Any]]]:
        return list(await asyncio.gather(*(one(a) for a in agents)))

    entries = [e for listing in rt.run_sync(every, timeout=timeout + 5) for e in listing
               if _MESH in e["parts"]]
    worth = {e["uid"] for e in entries if e["live"] or e["failed"]}
    return [e for e in entries if e["uid"] in worth]


def reattach(rt: Runtime, agents: tuple[str, ...], name: str) -> MeshRecord:
    """Take over the kept proc mesh named ``name`` (or with that uid) on ``agents``; returns
    its record."""
    entries = _entries_of(rt, agents, name)
    record = _load_mesh(entries[0], name)
    held = api_state(rt).proc_meshes.get(record.uid)
    if held is not None:
        how = f"handed it over ({held.state.stopped})" if held.state.stopped else "holds it"
        raise ValueError(f"reattach_procs({name!r}): this controller {how}: mesh "
                         f"{record.uid} is for another controller (a new process) to "
                         "reattach")
    keeping = {e["agent"] for e in entries}
    outside = sorted(set(record.agents) - keeping - set(agents))
    if outside:
        raise ValueError(
            f"reattach_procs({name!r}): the mesh also has procs on {', '.join(outside)}, "
            "which this host mesh does not hold; reattach through a host mesh of all its "
            "hosts")
    actors = _load_actors(entries, name)
    _make_books(rt, record, actors)
    try:
        answers = rt.run_sync(lambda: _take_over(rt, record, entries, actors),
                              timeout=float(config.get("connect_timeout")) * 2 + 5)
    except BaseException:
        _unmake_books(rt, record, actors)
        raise
    _settle_actor_meshes(rt, record, actors, answers, name)
    return record


def _entries_of(rt: Runtime, agents: tuple[str, ...], name: str) -> list[dict[str, Any]]:
    """The workers' entries of the one kept mesh named ``name`` (or of uid ``name``)."""
    listing = kept_meshes(rt, agents)
    uids = sorted({e["uid"] for e in listing if name in (e["name"], e["uid"])})
    if not uids:
        there = sorted({f"{e['name']} ({e['uid']})" for e in listing}) or ["none"]
        mine = [r.name for r in api_state(rt).proc_meshes.values() if r.name == name]
        also = (f" (this controller already holds a proc mesh named {name!r}: reattached "
                "or spawned here)" if mine else "")
        raise ValueError(f"reattach_procs({name!r}): these hosts keep no detached proc mesh "
                         f"of that name; they keep: {', '.join(there)}{also}")
    if len(uids) > 1:
        raise ValueError(f"reattach_procs({name!r}): these hosts keep several detached proc "
                         f"meshes of that name: {', '.join(uids)}; pass the uid of the one "
                         f"to reattach, e.g. reattach_procs({uids[0]!r})")
    return [e for e in listing if e["uid"] == uids[0]]


def _load_mesh(entry: dict[str, Any], name: str) -> MeshRecord:
    try:
        record: MeshRecord = cloudpickle.loads(entry["parts"][_MESH])
    except Exception as exc:
        raise RuntimeError(f"reattach_procs({name!r}): the record of mesh {entry['uid']} "
                           f"does not load here ({type(exc).__name__}: {exc})") from exc
    return record


def _load_actors(entries: list[dict[str, Any]], name: str) -> dict[str, tuple[m.SpawnActor,
                                                                               type]]:
    """The actor meshes of the record whose classes load here, by uid; a warning for each
    that does not (its mesh is not adopted: no mesh object can be made without its class)."""
    parts: dict[str, bytes] = {}
    for entry in entries:
        parts.update((k, v) for k, v in entry["parts"].items() if k.startswith("actor:"))
    actors: dict[str, tuple[m.SpawnActor, type]] = {}
    for data in parts.values():
        part: ActorRecord = cloudpickle.loads(data)
        payload = part.payload
        try:
            actors[payload.uid] = (payload, cloudpickle.loads(part.cls))
        except Exception as exc:  # noqa: BLE001 - any import or unpickling error
            warnings.warn(
                f"reattach_procs({name!r}): actor mesh {payload.name!r} is not adopted: its "
                f"class {payload.class_name} does not load in this controller "
                f"({type(exc).__name__}: {exc}); make it importable here (same modules "
                "and sys.path as the controller that spawned it)", RuntimeWarning,
                stacklevel=5)
    return actors


def _make_books(rt: Runtime, record: MeshRecord,
                actors: dict[str, tuple[m.SpawnActor, type]]) -> None:
    """The books this controller keeps of a mesh it spawned, made for a reattached one."""
    api = api_state(rt)
    roots = sorted({rt.root, *rt.my_addresses})
    spec = {**record.spec, "root": rt.root, "root_addresses": roots,  # respawns are ours
            "proc_addrs": record.addrs, "config": config.get_runtime_config(),
            "order_output": bool(config.get("order_output")),
            "kill_descendants": bool(config.get("kill_proc_descendants"))}
    api.proc_meshes[record.uid] = ProcMeshRecord(
        _state(record.uid), list(record.addrs), list(record.agents), None, record.name,
        record.shape, spec, dict(record.entries), dict(record.incarnations))
    supervisor(rt).mesh_spawned(record.uid, None, "proc", record.name, record.shape,
                                record.addrs)
    for uid, (payload, cls) in actors.items():
        payload = replace(payload, owner=rt.contact, owner_uid=None, proc_addrs=record.addrs)
        api.spawned[uid] = payload
        api.owned[uid] = OwnedMesh(uid, payload.class_name, payload.shape, record.addrs,
                                   None, cls)
        _state(uid)
        supervisor(rt).mesh_spawned(uid, None, "actor", payload.name, payload.shape,
                                    record.addrs, payload.class_name)


def _unmake_books(rt: Runtime, record: MeshRecord,
                  actors: dict[str, tuple[m.SpawnActor, type]]) -> None:
    """A takeover that failed everywhere: this controller keeps nothing of the mesh."""
    api = api_state(rt)
    api.proc_meshes.pop(record.uid, None)
    for uid in actors:
        api.spawned.pop(uid, None)
        api.owned.pop(uid, None)


async def _take_over(rt: Runtime, record: MeshRecord, entries: list[dict[str, Any]],
                     actors: dict[str, tuple[m.SpawnActor, type]]
                     ) -> dict[str, dict[str, list[str]]]:
    """Take the procs over at each worker, then tell each live proc; returns each
    answering proc's actor meshes by state. Procs that cannot be taken over fail."""
    timeout = float(config.get("connect_timeout"))
    taken = await asyncio.gather(*(ask(rt, e["agent"], lambda port, me: m.Reattach(
        port, me, record.uid), timeout) for e in entries), return_exceptions=True)
    refused = [(e, exc) for e, exc in zip(entries, taken) if isinstance(exc, BaseException)]
    if len(refused) == len(entries):
        exc = refused[0][1]
        raise TransportError(f"no worker handed proc mesh {record.uid} over (worker "
                             f"{refused[0][0]['agent']}: {type(exc).__name__}: {exc})")
    keeping = {e["agent"] for e in entries}
    for rank, agent in enumerate(record.agents):
        if agent not in keeping:  # it never heard of the detach, or handed over already
            _fail(rt, record, rank, "was not kept by its worker (the detach or an earlier "
                                    "takeover did not reach it before its controller ended)")
    for entry, exc in refused:
        for addr in entry["live"]:
            _unanswered(rt, record, addr, exc, worker=entry["agent"])
    live = [a for e, t in zip(entries, taken) if not isinstance(t, BaseException)
            for a in e["live"]]
    roots = sorted({rt.root, *rt.my_addresses})
    old = sorted(set(record.spec.get("root_addresses", ())) | {str(record.spec.get("root"))}
                 | {payload.owner for payload, _ in actors.values()})  # as spawned
    asks = [ask(rt, addr, lambda port, me: m.Adopt(port, me, rt.root, roots, old), timeout)
            for addr in live]
    answers: dict[str, dict[str, list[str]]] = {}
    for addr, answer in zip(live, await asyncio.gather(*asks, return_exceptions=True)):
        if isinstance(answer, dict):
            answers[addr] = answer
        else:
            _unanswered(rt, record, addr, answer)
    return answers


def _fail(rt: Runtime, record: MeshRecord, rank: int, why: str) -> None:
    """Rank ``rank`` of the mesh fails through supervision, ``why`` as its cause (loop)."""
    rt.dispatch(m.ProcExited(record.addrs[rank], None, why, False, record.uid, rank,
                             record.agents[rank], []))


def _unanswered(rt: Runtime, record: MeshRecord, addr: str, exc: BaseException,
                worker: str = "") -> None:
    """A live proc could not be taken over (it, or its ``worker``, did not answer): it fails
    through supervision (it may be respawned) and is stopped, instead of running on with
    the old controller as its root."""
    who = f"its worker {worker}" if worker else "it"
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        timeout = float(config.get("connect_timeout"))
        why = f"was not taken over: {who} did not answer within {timeout:g}s"
    else:
        why = f"was not taken over: {who} refused ({type(exc).__name__}: {exc})"
    rank = record.addrs.index(addr)
    _fail(rt, record, rank, why)
    port_id = rt.open_port(lambda reply, frame: None)
    rt.send_sys(record.agents[rank], m.StopProcs([addr], why, (rt.contact, port_id)))


def _settle_actor_meshes(rt: Runtime, record: MeshRecord,
                         actors: dict[str, tuple[m.SpawnActor, type]],
                         answers: dict[str, dict[str, list[str]]], name: str) -> None:
    """What the procs said of each actor mesh: stopped everywhere, it is not adopted;
    stopped on some ranks, those ranks are stopped here; never delivered (its controller
    ended before its spawn reached the procs), not adopted, with a warning."""
    sup = supervisor(rt)
    for uid, (payload, _) in actors.items():
        states = {g: _state_of(answers[record.addrs[g]], uid)
                  for g in payload.shape.ranks() if record.addrs[g] in answers}
        if not states:
            continue  # every proc of it is dead: their failures say so
        gone = {g for g, st in states.items() if st in ("stopped", "absent")}
        if len(gone) == len(payload.shape.ranks()):
            api = api_state(rt)
            api.spawned.pop(uid, None)
            api.owned.pop(uid, None)
            sup.mesh_stopped(uid, "stopped before this controller reattached its procs")
            if all(st == "absent" for st in states.values()):
                warnings.warn(f"reattach_procs({name!r}): actor mesh {payload.name!r} is not "
                              "adopted: its spawn never reached the procs (the controller "
                              "that spawned it ended first)", RuntimeWarning, stacklevel=4)
        elif gone:
            sup.ranks_stopped(uid, frozenset(gone), "stopped, or never spawned there, before "
                                                    "this controller reattached its procs")


def _state_of(answer: dict[str, list[str]], uid: str) -> str:
    for state in ("live", "failed", "stopped"):
        if uid in answer[state]:
            return state
    return "absent"
