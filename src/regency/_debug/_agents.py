"""Asking the host agents of some procs one question each, and gathering the answers.

Stack dumps and log tails are served by the host agent of each machine (it started the procs
and keeps their files), so the controller groups the procs by agent, sends each agent one
message naming its procs, and waits, up to a bound, for every agent's ``{addr: value}``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._runtime._pickling import loads
from .._wire._messages import OK, Reply, SystemMessage

if TYPE_CHECKING:
    from .._runtime._runtime import Runtime

__all__ = ["ask_agents"]

#: ``(mesh name, rank, proc address, host agent address)`` of one proc.
ProcRef = tuple[str, int, str, str]


def ask_agents(rt: Runtime, procs: list[ProcRef],
               question: Callable[[list[str], tuple[str, int]], SystemMessage],
               timeout: float) -> dict[str, Any]:
    """Send ``question(addrs, reply port)`` to the agent of each group of ``procs``; return
    the answers merged (an agent that did not answer within ``timeout`` adds nothing)."""
    by_agent: dict[str, list[str]] = {}
    for _, _, addr, agent in procs:
        by_agent.setdefault(agent, []).append(addr)
    answers: dict[str, Any] = {}
    done = threading.Event()
    left = [len(by_agent)]
    lock = threading.Lock()

    def on_reply(reply: Reply, frame: list[memoryview]) -> None:
        value: Any = loads(frame[1], frame[2:])
        with lock:
            if reply.status == OK and isinstance(value, dict):
                answers.update(value)
            left[0] -= 1
            if left[0] <= 0:
                done.set()

    port = rt.open_port(on_reply, frozenset(by_agent))
    try:
        for agent, addrs in by_agent.items():
            rt.send_sys(agent, question(addrs, (rt.contact, port)))
        if by_agent:
            done.wait(timeout)
    finally:
        rt.close_port(port)
    with lock:
        return dict(answers)
