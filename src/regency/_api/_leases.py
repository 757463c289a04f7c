"""Asking workers: one request and its answer, lease renewals, releasing workers.

Below the meshes (a host mesh releases its workers) and above nothing but the runtime: the
heartbeat loop that declares a silent worker lost lives with the workers (``_workers``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
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


RELEASE_TIMEOUT_S = 10.0  # how long a release (or shutdown) waits for a worker's answer


def release_workers(rt: Runtime, agents: tuple[str, ...], exit: bool) -> None:
    """Release (and optionally shut down) workers; called from HostMesh.stop/shutdown.

    A shutdown also reaches workers that were declared lost, without waiting for them (a
    lost host must not delay it): one frozen (SIGSTOP) on this machine is SIGKILLed at once,
    saying so; any other is sent the shutdown, which it obeys if it comes back (resumed,
    reconnected). A live worker that does not answer within ``RELEASE_TIMEOUT_S`` is
    handled the same way (``_unanswered``).
    """
    beats = api_state(rt).heartbeats
    for agent in agents:
        beats.pop(agent, None)
    lost = tuple(a for a in agents if a in rt.dead_addrs)
    agents = tuple(a for a in agents if a not in rt.dead_addrs)
    if exit:
        for agent in lost:
            if not _kill_if_stopped_here(rt, agent):
                rt.call_soon(_send_release, rt, agent)
    if not agents:
        return

    async def one(agent: str) -> bool:
        try:
            await ask(rt, agent, lambda port, me: m.Release(port, me, exit), RELEASE_TIMEOUT_S)
        except (asyncio.TimeoutError, TimeoutError):
            return False
        except Exception:  # noqa: BLE001 - gone or refusing: nothing more to do
            return True
        return True

    async def go() -> list[bool]:
        return list(await asyncio.gather(*(one(a) for a in agents)))

    answered = rt.run_sync(go, timeout=RELEASE_TIMEOUT_S + 5)
    if exit:
        for agent, ok in zip(agents, answered):
            if not ok:
                _unanswered(rt, agent)


def _send_release(rt: Runtime, agent: str) -> None:
    """Send a shutdown to ``agent`` and wait for no answer (loop thread)."""
    port_id = rt.open_port(lambda reply, frame: rt.close_port(port_id), frozenset({agent}))
    rt.send_sys(agent, m.Release((rt.contact, port_id), rt.contact, True))


def _unanswered(rt: Runtime, agent: str) -> None:
    """A worker did not answer its shutdown: kill it if it is here and stopped, else say so."""
    if _kill_if_stopped_here(rt, agent):
        return
    host, pid = api_state(rt).worker_pids.get(agent, ("", 0))
    _say(f"regency: worker {agent} (pid {pid or '?'} on {host or '?'}) did not answer the "
         f"shutdown within {RELEASE_TIMEOUT_S:.0f} s (frozen or unreachable?): it may still "
         "be running; stop it where it runs")


def _kill_if_stopped_here(rt: Runtime, agent: str) -> bool:
    """SIGKILL the worker ``agent`` if it runs on this machine and is stopped (SIGSTOP)."""
    host, pid = api_state(rt).worker_pids.get(agent, ("", 0))
    if host != rt.hostname or not pid or not _stopped(pid):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    _say(f"regency: worker {agent} (pid {pid} on this machine) is stopped (SIGSTOP) and "
         "cannot answer the shutdown: killed it with SIGKILL (its procs die with it)")
    return True


def _say(text: str) -> None:
    """A line for the user on stderr (regency's logger is silent unless configured)."""
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` of this machine is stopped (state T: SIGSTOP, SIGTSTP)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False
