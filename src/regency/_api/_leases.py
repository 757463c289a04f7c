"""Asking workers: one request and its answer, lease renewals, releasing workers.

Below the meshes (a host mesh releases its workers) and above nothing but the runtime: the
heartbeat loop that declares a silent worker lost lives with the workers (``_workers``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from .. import config
from .._runtime._runtime import Runtime
from .._wire import _messages as m
from ._replies import decode, to_exception
from ._state import api_state

__all__ = ["ask", "beat", "release_workers"]


async def ask(rt: Runtime, addr: str, make: Callable[[m.PortRef, str], m.SystemMessage],
              timeout: float) -> Any:
    """Send ``make(reply port, our contact)`` to the worker at ``addr``; await its answer."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def on_reply(reply: m.Reply, frame: list[memoryview]) -> None:
        rt.close_port(port_id)
        value = decode(frame)
        if fut.done():
            return
        if reply.status == m.OK:
            fut.set_result(value)
        else:
            fut.set_exception(to_exception(reply.status, value))

    port_id = rt.open_port(on_reply, frozenset({addr}))
    rt.send_sys(addr, make((rt.contact, port_id), rt.contact))
    return await asyncio.wait_for(fut, timeout)


async def beat(rt: Runtime, agent: str, beats: dict[str, float]) -> None:
    """Renew the lease of the worker at ``agent``; note when it answered in ``beats``."""
    try:
        await ask(rt, agent, lambda port, me: m.Heartbeat(port, me),
                  float(config.get("host_lost_timeout")))
    except Exception:
        return
    if agent in beats:
        beats[agent] = time.monotonic()


def release_workers(rt: Runtime, agents: tuple[str, ...], exit: bool) -> None:
    """Release (and optionally shut down) workers; called from HostMesh.stop/shutdown."""
    beats = api_state(rt).heartbeats
    for agent in agents:
        beats.pop(agent, None)
    agents = tuple(a for a in agents if a not in rt.dead_addrs)  # a lost host cannot answer
    if not agents:
        return

    async def go() -> None:
        await asyncio.gather(
            *(ask(rt, a, lambda port, me: m.Release(port, me, exit), 10.0) for a in agents),
            return_exceptions=True)

    rt.run_sync(go, timeout=15)
