"""What an owner hears of its meshes: failures, procs up and exited, lost hosts and peers.

Each handler hands what happened to this runtime's supervisor, which alone decides
(``_supervisor``, ``regency._supervision``).
"""

from __future__ import annotations

import logging

from .._runtime._runtime import Runtime
from .._wire import _messages as m
from ..errors import MeshFailure, SupervisionError
from . import _failfast
from ._mesh_state import answer_lost_host
from ._state import api_state, supervisor
from ._supervise import banner

__all__ = ["host_lost", "on_actor_failed", "on_peer_lost", "on_proc_exited", "on_proc_up"]

log = logging.getLogger("regency.dispatch")


def on_actor_failed(rt: Runtime, msg: m.ActorFailed) -> None:
    """A member of a mesh this process owns failed (its report)."""
    failure: MeshFailure = msg.failure
    sup = supervisor(rt)
    if msg.uid in sup._shapes:
        sup.actor_failed(msg.uid, msg.rank, failure)
    else:  # a mesh this runtime did not record: never lose it, the root hears of it
        log.error("regency: failure of an unknown mesh:\n%s", failure.report())
        if rt.role == "controller":
            _failfast.fail_fast(banner(failure.report()), 1)


def on_proc_up(rt: Runtime, msg: m.ProcUp) -> None:
    """A proc of a mesh this process spawned is up (or failed to start)."""
    info = api_state(rt).proc_meshes.get(msg.mesh_uid)
    if info is None:
        return
    st = info.state
    if msg.error:
        rank = info.addr_list.index(msg.addr) if msg.addr in info.addr_list else None
        where = (f"rank {rank} {dict(info.shape.point(info.shape.local_rank(rank)))} of "
                 if rank is not None and rank in info.shape.ranks() else "")
        why = (f"proc {where}proc mesh {info.name!r} ({msg.addr}) failed to start: "
               f"{msg.error}")
        st.ready.set_exception(SupervisionError(why))
        return
    st.waiting -= 1
    if st.waiting <= 0:
        st.ready.set_result(True)


def on_proc_exited(rt: Runtime, msg: m.ProcExited, drain: bool = True) -> None:
    """A host agent reaped a proc of a mesh this process spawned."""
    addr = msg.addr
    info = api_state(rt).proc_meshes.get(msg.mesh_uid)
    rt.mark_dead(addr, f"the proc {msg.cause}")
    if info is not None and not info.state.ready.done():
        info.state.ready.set_exception(SupervisionError(f"proc {addr} {msg.cause}"))
    supervisor(rt).proc_exited(msg, drain=drain)
    answer_lost_host(addr)  # what was asked of the proc (a stop) is answered


def host_lost(rt: Runtime, agent: str, why: str) -> None:
    """A worker host stopped answering: every proc there is lost, through supervision, and
    what was asked of its agent (a stop) is answered."""
    rt.mark_dead(agent, why)
    answer_lost_host(agent)
    for uid, info in list(api_state(rt).proc_meshes.items()):
        for rank, (addr, a) in enumerate(zip(info.addr_list, info.agents)):
            # a proc whose connection broke with its host is lost with it: only an exit
            # already reported is its whole story
            if a == agent and not rt.known_dead(addr):
                on_proc_exited(rt, m.ProcExited(addr, None, f"was lost: {why}", False, uid,
                                                rank, agent, []),
                               drain=False)  # an unreachable host's connections only look live


def on_peer_lost(rt: Runtime, addr: str, exc: BaseException | None) -> None:
    """A connection to ``addr`` broke: what was asked of it is answered (a stop)."""
    supervisor(rt).connection_lost(addr, f"connection lost ({exc})")
    answer_lost_host(addr)
