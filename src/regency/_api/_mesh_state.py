"""Helpers of the meshes: their shared state, acknowledgement ports, who is spawning."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from .. import config
from .._runtime._completion import Completion
from ._context import Context, Instance, _current, root_context
from ._process import runtime
from ._state import MeshState, api_state

__all__: list[str] = []


def _token() -> str:
    return secrets.token_hex(5)


def _state(uid: str, n: int = 0) -> MeshState:
    table = api_state(runtime()).mesh_state
    st = table.get(uid)
    if st is None:
        st = table[uid] = MeshState(n)
    return st


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def countdown_port(n: int, done: Completion) -> tuple[str, int]:
    """A reply port that completes ``done`` after ``n`` acknowledgements (at once if 0)."""
    rt = runtime()
    left = {"n": n}

    def ack(reply: Any, frame: list[memoryview]) -> None:
        left["n"] -= 1
        if left["n"] <= 0:
            rt.close_port(port_id)
            done.set_result(None)

    port_id = rt.open_port(ack)
    if n <= 0:
        rt.close_port(port_id)
        done.set_result(None)
    return (rt.contact, port_id)


def agent_port(agent: str, answered: Callable[[], None]) -> tuple[str, int]:
    """A reply port for a request to the host agent (or proc) at ``agent``: ``answered()``
    runs once, when it answers or when it is lost (``answer_lost_host``): a request to a
    process that dies with it must not wait for ever."""
    rt = runtime()
    asked = api_state(rt).asked_agents.setdefault(agent, {})

    def reply(reply: Any = None, frame: Any = None) -> None:
        if asked.pop(port_id, None) is not None:
            rt.close_port(port_id)
            _drop_if_empty(agent)
            answered()

    port_id = rt.open_port(reply)
    asked[port_id] = reply
    return (rt.contact, port_id)


def forget_port(agent: str, port_id: int) -> None:
    """Let an ``agent_port`` go unanswered (its asker gave up)."""
    rt = runtime()
    asked = api_state(rt).asked_agents.get(agent)
    if asked is not None and asked.pop(port_id, None) is not None:
        rt.close_port(port_id)
        _drop_if_empty(agent)


def _drop_if_empty(agent: str) -> None:
    asked_agents = api_state(runtime()).asked_agents
    if not asked_agents.get(agent, True):
        del asked_agents[agent]


def members_port(members: Mapping[int, str], done: Completion) -> tuple[str, int]:
    """One reply port for a request to many members (global rank -> proc address), each
    answering with its rank: ``done`` completes once every member answered or its proc
    was lost (``answer_lost_host``)."""
    rt = runtime()
    pending = dict(members)
    asked_agents = api_state(rt).asked_agents
    port = [0]  # its id, once opened

    def finish() -> None:
        if not pending and not done.done():
            rt.close_port(port[0])
            for addr in set(members.values()):
                asked = asked_agents.get(addr)
                if asked is not None:
                    asked.pop(port[0], None)
                    _drop_if_empty(addr)
            done.set_result(None)

    def reply(reply: Any, frame: Any) -> None:
        rank = getattr(reply, "rank", None)
        if rank in pending:
            del pending[rank]
        elif rank is None and pending:  # a member that does not say which: one of them
            pending.popitem()
        finish()

    def lost(addr: str) -> None:
        for g in [g for g, a in pending.items() if a == addr]:
            del pending[g]
        finish()

    port_id = port[0] = rt.open_port(reply)
    for addr in set(members.values()):
        asked_agents.setdefault(addr, {})[port_id] = partial(lost, addr)
    if not pending:
        finish()
    return (rt.contact, port_id)


def answer_lost_host(agent: str) -> None:
    """The host agent ``agent`` is lost: its requests' ports are answered now."""
    for reply in list(api_state(runtime()).asked_agents.pop(agent, {}).values()):
        reply()


def _owner_uid() -> str | None:
    ctx = _current.get(None)
    return ctx.actor_instance.mesh_uid if ctx is not None else None


def _creator() -> Instance:
    """A copy of the spawning instance, to send along (without its ``stop``)."""
    ctx: Context | None = _current.get(None)
    if ctx is None:
        ctx = root_context()
    inst = ctx.actor_instance
    return Instance(inst.actor_id, inst.name, inst.class_name, inst.rank, inst.proc_id,
                    inst.creator, inst.mesh_uid, inst._proc_mesh, None, inst._proc)


def _proc_address(job: str, uid: str, rank: int, agent: str) -> str:
    """Where a new proc will listen, by the configured transport.

    Procs of a remote host (a worker, reached over tcp) get a logical ``via:`` name that their
    host agent resolves to the port they bound.
    """
    short = uid.rsplit("-", 1)[-1]  # the random part: names may be long or odd
    if agent.startswith("tcp:"):
        return f"via:{agent}/{short}-{rank}"
    transport = str(config.get("default_transport"))
    if transport in ("unix", "ipc"):
        return f"unix:@regency-{job}-{short}-{rank}"
    if transport == "tcp":
        return f"tcp:127.0.0.1:{_free_port()}"
    raise ValueError(f"unknown transport {transport!r}; use 'unix' or 'tcp'")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
