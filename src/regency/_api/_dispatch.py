"""System-message handlers of the API layer, installed into each runtime.

* in every runtime: ``spawn_actor``, ``stop_actor``, ``actor_failed``, ``proc_up``,
  ``proc_exited`` (the last three arrive at owners);
* in procs: ``stop_proc``;
* at the root: ``get_or_spawn_controller``.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
from typing import Any

from .. import config
from .._runtime._cell import AsyncCell, SyncCell
from .._runtime._host_agent import write_lines
from .._runtime._runtime import Runtime
from .._wire import _messages as m
from ..errors import MeshFailure, SupervisionError
from ._behavior import ActorBehavior
from ._state import api_state
from ._supervisor import Supervisor

log = logging.getLogger("regency.dispatch")


def install(rt: Runtime) -> None:
    """Register the API layer's handlers in ``rt``."""
    rt.handle(m.SpawnActor, lambda msg: _spawn_actor(rt, msg))
    rt.handle(m.StopActor, lambda msg: _stop_actor(rt, msg))
    rt.handle(m.ActorFailed, lambda msg: _actor_failed(rt, msg))
    rt.handle(m.ProcUp, lambda msg: _proc_up(rt, msg))
    rt.handle(m.ProcExited, lambda msg: _proc_exited(rt, msg))
    rt.handle(m.GetOrSpawnController, lambda msg: _get_or_spawn_controller(rt, msg))
    rt.handle(m.Fault, lambda msg: _fault(rt, msg))
    rt.handle(m.ProcOutput, lambda msg: write_lines(msg.label, msg.stream, msg.lines))
    rt.peer_lost_hooks.append(lambda addr, exc: _peer_lost(rt, addr, exc))
    api_state(rt).supervisor = Supervisor(rt)


# -- actors ----------------------------------------------------------------------------------
def _spawn_actor(rt: Runtime, msg: m.SpawnActor) -> None:
    try:
        g = msg.proc_addrs.index(rt.address)
    except ValueError:
        return
    _register_tree(rt, msg, g)
    why = rt.bootstrap_error
    if why is None:
        try:
            cls, args, kwargs = pickle.loads(msg.body)
        except Exception as exc:
            why = (f"the actor class {msg.class_name} (or its arguments) could not be loaded "
                   f"in the proc: {type(exc).__name__}: {exc}")
        msg.body = b""  # unpickled once: do not keep the bytes
    else:
        why = f"the proc's bootstrap failed: {why}"
    if why is not None:
        _spawn_failed(rt, msg, g, why)
        return
    behavior = ActorBehavior(rt, msg, cls, args, kwargs, g)
    cell: Any
    if behavior.is_async:
        cell = AsyncCell(behavior.uid, behavior, rt.loop, behavior.setup_context, rt.on_loop,
                         rt)
    else:
        cell = SyncCell(behavior.uid, behavior, behavior.setup_context, rt)
        behavior.before_reply = cell.before_reply
    ack = msg.ack
    cell.control(lambda: behavior.init(ack))
    rt.add_cell(behavior.uid, cell)


def _register_tree(rt: Runtime, msg: m.SpawnActor, g: int) -> None:
    """Remember the mesh's relay tree: this proc forwards casts to its children."""
    from .._runtime._relay import Tree

    shape = msg.shape
    fanout = int(msg.fanout or config.get("max_cast_fanout"))
    if len(shape) > fanout:
        ranks = shape.ranks()
        rt.trees[msg.uid] = (Tree(ranks, [msg.proc_addrs[r] for r in ranks], fanout), g)


def _spawn_failed(rt: Runtime, msg: m.SpawnActor, g: int, why: str) -> None:
    """The actor cannot exist here: calls to it fail at once, and its owner is told."""
    shape = msg.shape
    local = shape.local_rank(g)
    failure = MeshFailure(mesh_name=msg.uid, ranks=[local], coords=[dict(shape.point(local))],
                          actor_class=msg.class_name, endpoint="__init__", host=rt.hostname,
                          pid=rt.pid, cause=why)
    rt.add_cell(msg.uid, Tombstone(rt, msg.uid, why, failure))
    rt.send_reply(msg.ack, g, m.OK, None)
    rt.send_sys(msg.owner, m.ActorFailed(msg.uid, g, failure, msg.owner_uid))


class Tombstone:
    """What stays of a stopped actor: calls to it fail at once."""

    def __init__(self, rt: Runtime, uid: str, reason: str,
                 failure: MeshFailure | None = None) -> None:
        self.rt = rt
        self.uid = uid
        self.reason = reason
        self.failure = failure

    def enqueue(self, call: m.Call, frame: list[memoryview]) -> None:
        """Answer a call with why this actor is gone."""
        port = call.port
        if port is not None:
            if self.failure is not None:
                msg = f"actor mesh {self.uid} failed: {self.reason}"
            else:
                msg = f"actor mesh {self.uid} was stopped ({self.reason})"
            self.rt.send_reply(port, None, m.SUPERVISION, (msg, self.failure))

    def control(self, fn: Any) -> None:
        """Nothing runs in a stopped actor."""


def _stop_actor(rt: Runtime, msg: m.StopActor) -> None:
    uid = msg.uid
    port = msg.port
    cell = rt.cells.get(uid)
    behavior = getattr(cell, "behavior", None)
    if cell is None or behavior is None:
        if port is not None:
            rt.send_reply(port, None, m.OK, None)
        return
    rt.cells[uid] = Tombstone(rt, uid, msg.reason)
    stop_owned(rt, uid)

    def finish() -> Any:
        result = behavior.cleanup(None)
        if asyncio.iscoroutine(result):
            return _then(result, lambda: _acked(rt, port))
        _acked(rt, port)
        return None

    cell.control(finish)
    cell.close()


def stop_owned(rt: Runtime, owner_uid: str) -> None:
    """A mesh never outlives its owner: stop what the actor ``owner_uid`` spawned."""
    api = api_state(rt)
    for info in api.proc_meshes.values():
        st = info.state
        if info.owner_uid != owner_uid or st.stopped:
            continue
        st.stopped = "its owner stopped"
        st.stopped_ranks.update(range(len(info.addr_list)))
        by_agent: dict[str, list[str]] = {}
        for addr, agent in zip(info.addr_list, info.agents):
            by_agent.setdefault(agent, []).append(addr)
        for agent, addrs in by_agent.items():
            rt.send_sys(agent, m.StopProcs(addrs, "its owner stopped", None))
    for uid, rec in list(api.owned.items()):
        if rec.owner_uid == owner_uid:
            for addr in {rec.proc_addrs[g] for g in rec.shape.ranks()}:
                rt.send_sys(addr, m.StopActor(uid, "its owner stopped", None))


async def _then(coro: Any, after: Any) -> None:
    try:
        await coro
    finally:
        after()


def _acked(rt: Runtime, port: tuple[str, int] | None) -> None:
    if port is not None:
        rt.send_reply(port, None, m.OK, None)


async def stop_cells(rt: Runtime, timeout: float) -> None:
    """Stop every actor of this runtime (``__cleanup__`` runs), within ``timeout``."""
    loop = asyncio.get_running_loop()
    pending: list[asyncio.Future[None]] = []
    for uid, cell in list(rt.cells.items()):
        behavior = getattr(cell, "behavior", None)
        if behavior is None:
            continue
        fut: asyncio.Future[None] = loop.create_future()
        pending.append(fut)
        rt.cells[uid] = Tombstone(rt, uid, "the proc is stopping")
        stop_owned(rt, uid)  # a mesh never outlives its owner: its meshes stop first

        def finish(b: Any = behavior, f: asyncio.Future[None] = fut) -> Any:
            def done() -> None:
                loop.call_soon_threadsafe(_settle, f)

            result = b.cleanup(None)
            if asyncio.iscoroutine(result):
                return _then(result, done)
            done()
            return None

        cell.control(finish)
        cell.close()
    if pending:
        await asyncio.wait(pending, timeout=timeout)


def _settle(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def stop_everything(rt: Runtime, timeout: float) -> None:
    """Controller shutdown: stop owned proc meshes, local actors, then the host agent."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    by_agent: dict[str, list[str]] = {}
    for info in api_state(rt).proc_meshes.values():
        if info.state.stopped:
            continue
        info.state.stopped = "shutdown"
        for addr, agent in zip(info.addr_list, info.agents):
            by_agent.setdefault(agent, []).append(addr)
    acked: asyncio.Future[None] = loop.create_future()
    left = {"n": len(by_agent)}

    def ack(reply: m.Reply, frame: list[memoryview]) -> None:
        left["n"] -= 1
        if left["n"] <= 0:
            _settle(acked)

    port_id = rt.open_port(ack)
    for agent, addrs in by_agent.items():
        rt.send_sys(agent, m.StopProcs(addrs, "shutdown", (rt.address, port_id)))
    if by_agent:
        try:
            await asyncio.wait_for(acked, max(0.1, deadline - loop.time()))
        except asyncio.TimeoutError:
            pass
    rt.close_port(port_id)
    for task in list(rt.background):
        task.cancel()
    if rt.background:
        await asyncio.gather(*rt.background, return_exceptions=True)
    await stop_cells(rt, max(0.1, deadline - loop.time()))
    if rt.agent is not None:
        rt.agent.shutdown()
    await rt.router.aclose()


# -- failures at owners ------------------------------------------------------------------------
def supervisor(rt: Runtime) -> Supervisor:
    """The supervisor of ``rt`` (installed with the handlers)."""
    sup = api_state(rt).supervisor
    assert sup is not None, "the API layer's handlers are installed with the runtime"
    return sup


def _actor_failed(rt: Runtime, msg: m.ActorFailed) -> None:
    failure: MeshFailure = msg.failure
    api_state(rt).failed_ranks.setdefault(msg.uid, {})[msg.rank] = failure
    rt.troubles += 1
    sup = supervisor(rt)
    if msg.uid in sup._shapes:
        sup.actor_failed(msg.uid, msg.rank, failure)
    else:  # a mesh this runtime did not record: never lose it, the root hears of it
        log.error("regency: failure of an unknown mesh:\n%s", failure.report())
        if rt.role == "controller":
            from . import _failfast
            from ._supervise import banner

            _failfast.fail_fast(banner(failure.report()), 1)


def _proc_up(rt: Runtime, msg: m.ProcUp) -> None:
    info = api_state(rt).proc_meshes.get(msg.mesh_uid)
    if info is None:
        return
    st = info.state
    if msg.error:
        why = f"proc {msg.addr} failed to start: {msg.error}"
        st.ready.set_exception(SupervisionError(why))
        return
    st.waiting -= 1
    if st.waiting <= 0:
        st.ready.set_result(True)


def _proc_exited(rt: Runtime, msg: m.ProcExited, drain: bool = True) -> None:
    addr = msg.addr
    info = api_state(rt).proc_meshes.get(msg.mesh_uid)
    rt.mark_dead(addr, f"the proc {msg.cause}")
    if info is not None and not info.state.ready.done():
        info.state.ready.set_exception(SupervisionError(f"proc {addr} {msg.cause}"))
    supervisor(rt).proc_exited(msg, drain=drain)


def host_lost(rt: Runtime, agent: str, why: str) -> None:
    """A worker host stopped answering: every proc there is lost, through supervision."""
    rt.mark_dead(agent, why)
    for uid, info in list(api_state(rt).proc_meshes.items()):
        for rank, (addr, a) in enumerate(zip(info.addr_list, info.agents)):
            if a == agent and addr not in rt.dead_addrs:
                _proc_exited(rt, m.ProcExited(addr, None, f"was lost: {why}", False, uid, rank,
                                              agent, []),
                             drain=False)  # an unreachable host's connections only look live


def _peer_lost(rt: Runtime, addr: str, exc: BaseException | None) -> None:
    supervisor(rt).connection_lost(addr, f"connection lost ({exc})")


# -- fault injection (regency.testing) ------------------------------------------------------------
def _fault(rt: Runtime, msg: m.Fault) -> None:
    if msg.action == "signal":
        import os

        os.kill(os.getpid(), msg.signal)
        return
    cell = rt.cells.get(msg.uid)
    behavior = getattr(cell, "behavior", None)
    if behavior is not None:
        behavior.faults[msg.endpoint] = msg


# -- singletons at the root ---------------------------------------------------------------------
def _get_or_spawn_controller(rt: Runtime, msg: m.GetOrSpawnController) -> None:
    from ._bootstrap import this_proc

    table = api_state(rt).controllers
    name = msg.name
    port = msg.port
    try:
        mesh = table.get(name)
        if mesh is None:
            mesh = this_proc().spawn(name, msg.cls, *msg.args, **msg.kwargs)
            table[name] = mesh
        rt.send_reply(port, None, m.OK, mesh)
    except Exception as exc:
        rt.send_reply(port, None, m.RAW_ERROR, exc)
