"""Stopping actors: tombstones, a stop request, what a stopped owner owned, shutdown.

A stopped (or never constructed) actor leaves a ``Tombstone`` in its runtime's cells: calls
to it are answered at once with why it is gone. A mesh never outlives its owner: stopping an
actor stops the meshes it spawned. ``stop_cells`` ends a proc; ``stop_everything`` ends the
controller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from .. import config
from .._runtime._runtime import Runtime
from .._supervision._reasons import actor_gone
from .._wire import _messages as m
from ..errors import MeshFailure
from . import _reattach
from ._mesh_state import agent_port, forget_port
from ._state import api_state, supervisor

__all__ = ["Tombstone", "on_stop_actor", "stop_cells", "stop_everything", "stop_owned"]


class Tombstone:
    """What stays of a stopped actor: calls to it fail at once."""

    def __init__(self, rt: Runtime, uid: str, reason: str,
                 failure: MeshFailure | None = None, draining: Any = None,
                 name: str = "", rank: int | None = None) -> None:
        self.rt = rt
        self.uid = uid
        self.reason = reason
        self.failure = failure
        # the behavior whose cell still runs the calls it had when it was stopped, until
        # its cleanup is done: a cancel of one of them reaches it (``_cancel``)
        self.draining = draining
        self.name = name or getattr(getattr(draining, "instance", None), "name", "") or uid
        self.rank = rank if rank is not None else getattr(draining, "local", None)
        self.g: int | None = getattr(draining, "g", None)  # its global rank, when known
        # loop thread only: whether the stopped actor's cleanup is done, and who waits for it
        self.released = draining is None
        self.on_released: list[Callable[[], None]] = []

    def when_released(self, then: Callable[[], None]) -> None:
        """Run ``then`` (loop) once the stopped actor's ``__cleanup__`` is done (at once
        when it is)."""
        if self.released:
            then()
        else:
            self.on_released.append(then)

    def run_released(self) -> None:
        """The cleanup is done (loop): run what waited for it."""
        self.released = True
        waiting, self.on_released = self.on_released, []
        for fn in waiting:
            fn()

    def enqueue(self, call: m.Call, frame: list[memoryview]) -> None:
        """Answer a call with why this actor is gone (Monarch's words: the endpoint call
        failed, the actor's status)."""
        port = call.port
        if port is not None:
            msg = actor_gone(self.name, call.endpoint, self.uid, self.rank, self.reason,
                             self.failure is not None)
            self.rt.send_reply(port, None, m.SUPERVISION, (msg, self.failure))

    def control(self, fn: Any) -> None:
        """Nothing runs in a stopped actor."""


def on_stop_actor(rt: Runtime, msg: m.StopActor) -> None:
    uid = msg.uid
    port = msg.port
    cell = rt.cells.get(uid)
    behavior = getattr(cell, "behavior", None)
    if cell is None or behavior is None:
        if isinstance(cell, Tombstone):  # stopping already: answered once it is done
            cell.when_released(lambda: _acked(rt, port, cell.g))
        elif port is not None:
            rt.send_reply(port, None, m.OK, None)
        return
    stone = rt.cells[uid] = Tombstone(rt, uid, msg.reason, draining=behavior)

    def finish() -> Any:
        result = behavior.cleanup(None)
        acked = partial(_acked, rt, port, behavior.g)  # the member's rank: who answered
        if asyncio.iscoroutine(result):
            return _then(result, lambda: _released(behavior, stone, acked))
        _released(behavior, stone, acked)
        return None

    def clean_up() -> None:
        cell.control(finish)
        cell.close()

    _after_owned(rt, stop_owned(rt, uid), clean_up)


def _after_owned(rt: Runtime, stopping: list[asyncio.Future[None]],
                 then: Callable[[], None]) -> None:
    """Run ``then`` once what an actor owned has stopped (as in Monarch, its meshes'
    ``__cleanup__`` runs before its own), or after half of ``cleanup_timeout`` (the other
    half is its own: a proc's stop gives all of it that long) (loop)."""
    if not stopping:
        then()
        return

    async def wait() -> None:
        try:
            await asyncio.wait(stopping, timeout=_owned_timeout())
        finally:
            for fut in stopping:  # an answer that never came: its port is let go
                fut.cancel()
            then()

    task = rt.loop.create_task(wait())
    _waits.add(task)
    task.add_done_callback(_waits.discard)


_waits: set[asyncio.Task[None]] = set()  # the waits above, kept alive until done


def _owned_timeout() -> float:
    return float(config.get("cleanup_timeout")) / 2


def stop_owned(rt: Runtime, owner_uid: str) -> list[asyncio.Future[None]]:
    """A mesh never outlives its owner: stop what the actor ``owner_uid`` spawned (loop).

    Returns a future per stop asked for, settled once it is answered: the owned procs
    gone, or the owned actors' ``__cleanup__`` done (or their proc lost)."""
    api = api_state(rt)
    answers: list[asyncio.Future[None]] = []
    ending: set[str] = set()  # procs stopped whole here: their actors stop with them
    for uid, info in api.proc_meshes.items():
        st = info.state
        if info.owner_uid != owner_uid or st.stopped or info.detached:
            continue
        st.stopped = "its owner stopped"
        supervisor(rt).mesh_stopped(uid, "its owner stopped")  # no spawn on it again
        by_agent: dict[str, list[str]] = {}
        for addr, agent in zip(info.addr_list, info.agents):
            by_agent.setdefault(agent, []).append(addr)
        for agent, addrs in by_agent.items():
            ending.update(addrs)
            rt.send_sys(agent, m.StopProcs(addrs, "its owner stopped",
                                           _answered(rt, agent, answers)))
    for uid, rec in list(api.owned.items()):
        if rec.owner_uid == owner_uid:
            for addr in {rec.proc_addrs[g] for g in rec.shape.ranks()} - ending:
                rt.send_sys(addr, m.StopActor(uid, "its owner stopped",
                                              _answered(rt, addr, answers)))
    return answers


def _answered(rt: Runtime, target: str, answers: list[asyncio.Future[None]]) -> m.PortRef:
    """A port for ``target``'s answer, or its loss (``answer_lost_host``), settling a future
    added to ``answers``; cancelling the future lets the port go."""
    fut: asyncio.Future[None] = rt.loop.create_future()
    answers.append(fut)
    port = agent_port(target, lambda: _settle(fut))
    fut.add_done_callback(lambda f: forget_port(target, port[1]) if f.cancelled() else None)
    return port


async def _then(coro: Any, after: Any) -> None:
    try:
        await coro
    finally:
        after()


def _released(behavior: Any, stone: Tombstone, then: Any) -> None:
    behavior.release()
    stone.draining = None
    then()
    try:  # a sync actor's thread may run this: the loop runs what waits for it
        stone.rt.loop.call_soon_threadsafe(stone.run_released)
    except RuntimeError:
        pass  # the loop is closed: the proc is ending, nobody waits


def _acked(rt: Runtime, port: tuple[str, int] | None, rank: int | None = None) -> None:
    if port is not None:
        rt.send_reply(port, rank, m.OK, None)


async def stop_cells(rt: Runtime, timeout: float, why: str = "the proc is stopping") -> None:
    """Stop every actor of this runtime (``__cleanup__`` runs), within ``timeout``; calls that
    arrive meanwhile are refused with ``why``."""
    loop = asyncio.get_running_loop()
    pending: list[asyncio.Future[None]] = []
    for uid, cell in list(rt.cells.items()):
        behavior = getattr(cell, "behavior", None)
        if behavior is None:
            if isinstance(cell, Tombstone) and not cell.released:  # its own stop runs:
                left: asyncio.Future[None] = loop.create_future()  # the proc waits for it
                pending.append(left)
                cell.when_released(partial(_settle, left))
            continue
        fut: asyncio.Future[None] = loop.create_future()
        pending.append(fut)
        stone = rt.cells[uid] = Tombstone(rt, uid, why, draining=behavior)

        def finish(b: Any = behavior, f: asyncio.Future[None] = fut,
                   t: Tombstone = stone) -> Any:
            def done() -> None:
                loop.call_soon_threadsafe(_settle, f)

            result = b.cleanup(None)
            if asyncio.iscoroutine(result):
                return _then(result, lambda: _released(b, t, done))
            _released(b, t, done)
            return None

        def clean_up(c: Any = cell, fn: Callable[[], Any] = finish) -> None:
            c.control(fn)
            c.close()

        # a mesh never outlives its owner: its meshes stop (their __cleanup__ runs) first
        _after_owned(rt, stop_owned(rt, uid), clean_up)
    if pending:
        await asyncio.wait(pending, timeout=timeout)


def _settle(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _spawns_delivered(rt: Runtime, timeout: float) -> None:
    """Wait (``timeout`` s at most) until every proc of a detached mesh acknowledged the
    actor meshes spawned on it: a spawn just before the end must reach the procs that
    outlive this controller (their acknowledgement comes before ``__init__`` runs)."""
    api = api_state(rt)
    kept = {uid for uid, info in api.proc_meshes.items()
            if info.detached and not info.state.stopped}
    waits = [st.ready.as_asyncio() for uid, payload in api.spawned.items()
             if payload.proc_mesh._uid in kept and (st := api.mesh_state.get(uid)) is not None
             and not st.ready.done()]
    if waits:
        await asyncio.wait(waits, timeout=timeout)
    sent = _reattach.sends_done(rt, timeout)  # and their workers have the new records
    if sent is not None:
        await sent


async def stop_everything(rt: Runtime, timeout: float) -> None:
    """Controller shutdown: stop owned proc meshes, local actors, then the host agent."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    await _spawns_delivered(rt, max(0.1, min(5.0, timeout / 2)))
    stopping = [c.as_asyncio() for c in list(api_state(rt).stops_in_flight)]
    if stopping:  # stops the script asked for and did not wait for: their cleanup runs
        await asyncio.wait(stopping, timeout=max(0.1, (deadline - loop.time()) / 2))
    by_agent: dict[str, list[str]] = {}
    for info in api_state(rt).proc_meshes.values():
        if info.state.stopped or info.detached:  # a detached mesh: its workers keep it
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
