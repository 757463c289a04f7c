"""Fault injection for tests: kill a rank, make an endpoint raise, delay or drop messages.

Use these in your own tests to check that your program survives (or reports) failures::

    from regency.testing import kill_rank, inject_exception, delay_calls, drop_calls

    kill_rank(workers, 2)                                  # SIGKILL the proc of rank 2
    inject_exception(workers.step, ValueError("boom"))     # the next step() on each rank raises
    delay_calls(workers.step, 0.5, ranks=[0])              # rank 0 waits 0.5 s before step()
    drop_calls(workers.step, times=1)                      # the next step() is silently lost

Each injection applies to the ranks given (default: every rank of the mesh or slice the
endpoint belongs to) and to the next ``times`` calls of that endpoint on each rank; it is
installed before any call you make afterwards from the same thread (messages are ordered).

How it works: a fault travels as a ``Fault`` system message to the proc of each rank. There,
this module (loaded on the first fault: production procs never import it) puts a hook in
front of the actor's mailbox (``regency._api._intercept``) that drops the call, or wraps the
endpoint for that one call so that it raises or waits first. Nothing of it is on the path of
a message to an actor without faults.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal as _signal
import time
from collections.abc import Callable, Iterable
from typing import Any

from ._api._actor_mesh import ActorMesh
from ._api._endpoint import Endpoint
from ._api._intercept import intercept, release
from ._api._proc_mesh import ProcMesh
from ._api._process import runtime
from ._runtime._runtime import Runtime
from ._wire._messages import Call, Fault

__all__ = [
    "apply_fault", "delay_calls", "drop_calls", "flow_stats", "inject_exception", "kill_rank",
]


def _targets(mesh: ActorMesh | ProcMesh, ranks: Iterable[int] | None) -> list[tuple[int, str]]:
    route_ranks = mesh._shape.ranks()
    chosen = route_ranks if ranks is None else [route_ranks[r] for r in ranks]
    return [(g, mesh._proc_addrs[g]) for g in chosen]


def kill_rank(mesh: ActorMesh | ProcMesh, rank: int, sig: int = _signal.SIGKILL) -> None:
    """Send ``sig`` (default SIGKILL) to the proc hosting ``rank`` (local rank in ``mesh``)."""
    rt = runtime()
    for _, addr in _targets(mesh, [rank]):
        rt.send_sys(addr, Fault("signal", signal=int(sig)))


def _inject(endpoint: Endpoint[Any], kind: str, ranks: Iterable[int] | None, times: int,
            **extra: Any) -> None:
    if times < 1:
        raise ValueError(f"times must be >= 1, got {times}")
    rt = runtime()
    mesh = endpoint._mesh
    for _, addr in _targets(mesh, ranks):
        rt.send_sys(addr, Fault(kind, uid=mesh._uid, endpoint=endpoint._name, times=times,
                                **extra))


def inject_exception(endpoint: Endpoint[Any], exc: BaseException, *,
                     ranks: Iterable[int] | None = None, times: int = 1) -> None:
    """The next ``times`` calls of ``endpoint`` on the given ranks raise ``exc`` instead."""
    _inject(endpoint, "raise", ranks, times, exc=exc)


def delay_calls(endpoint: Endpoint[Any], seconds: float, *,
                ranks: Iterable[int] | None = None, times: int = 1) -> None:
    """The next ``times`` calls of ``endpoint`` wait ``seconds`` before running."""
    _inject(endpoint, "delay", ranks, times, seconds=float(seconds))


def drop_calls(endpoint: Endpoint[Any], *, ranks: Iterable[int] | None = None,
               times: int = 1) -> None:
    """The next ``times`` calls of ``endpoint`` are dropped: no reply ever comes.

    Use it to check that your code applies timeouts; a dropped call's future only ends by
    its own timeout (or the callee's failure).
    """
    _inject(endpoint, "drop", ranks, times)


def apply_fault(rt: Runtime, fault: Fault) -> None:
    """Carry out ``fault`` in this process (the handler of ``Fault`` messages, loop thread)."""
    if fault.action == "signal":
        os.kill(os.getpid(), fault.signal)
        return
    left = [fault.times]

    def hook(call: Call, frame: list[memoryview], cell: Any) -> bool:
        left[0] -= 1
        if left[0] <= 0:
            release(rt, fault.uid, fault.endpoint)
        if fault.action == "drop":
            return True  # taken, never answered
        behavior = cell.behavior
        cell.control(lambda: _override(behavior, fault))
        cell.enqueue(call, frame)
        cell.control(lambda: _restore(behavior, fault.endpoint))
        return True

    intercept(rt, fault.uid, fault.endpoint, hook)


def _override(behavior: Any, fault: Fault) -> None:
    """Make the endpoint raise or wait, for the one call queued next (actor's thread)."""
    actor = behavior.actor
    fn = getattr(actor, fault.endpoint, None)
    if actor is None or fn is None:
        return  # never constructed, or no such endpoint: the call fails by itself
    actor.__dict__[fault.endpoint] = _faulty(fn, fault, behavior.is_async)


def _restore(behavior: Any, name: str) -> None:
    actor = behavior.actor
    if actor is not None:
        actor.__dict__.pop(name, None)


def _faulty(fn: Callable[..., Any], fault: Fault, is_async: bool) -> Callable[..., Any]:
    """``fn`` as the fault wants it: raising its exception, or called after a delay."""
    if fault.action == "raise":
        exc = fault.exc
        assert exc is not None, "a 'raise' fault carries its exception"

        def raiser(*args: Any, **kwargs: Any) -> Any:
            raise exc

        return raiser
    seconds = fault.seconds
    if is_async:
        async def later(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(seconds)
            result = fn(*args, **kwargs)
            return (await result) if inspect.isawaitable(result) else result

        return later

    def delayed(*args: Any, **kwargs: Any) -> Any:
        time.sleep(seconds)
        return fn(*args, **kwargs)

    return delayed


def flow_stats() -> dict[str, Any]:
    """Flow-control counters of this process (see ADR 0012), as plain data.

    ``connections``: per peer address, each open connection's ``queued`` bytes in its write
    queue, the most it ever held (``max_queued``), its ``high_water`` mark, how often a
    sender waited for room (``blocked``; ``overrun``: waits on the loop thread that gave up)
    and whether reading it is paused (``throttled``). ``mailboxes``: per actor, the bytes of
    messages in its mailbox (``held``) and the most it held (``max_held``), with the mark;
    the number of messages (``count``) and the most it held (``max_count``).
    Call it from an actor to see that actor's proc.
    """
    rt = runtime()
    conns: dict[str, list[dict[str, Any]]] = {}
    for conn in list(rt.router.connections):
        conns.setdefault(conn.label, []).append({
            "queued": conn.queued, "max_queued": conn.max_queued,
            "high_water": conn.high_water, "blocked": conn.blocked,
            "overrun": conn.overrun, "throttled": conn.throttled,
        })
    boxes = {}
    for uid, cell in list(rt.cells.items()):
        backlog = getattr(cell, "backlog", None)
        if backlog is not None:
            boxes[uid] = {"held": backlog.added - backlog.taken, "max_held": backlog.most,
                          "high_water": backlog.high,
                          "count": backlog.n_added - backlog.n_taken,
                          "max_count": backlog.most_n}
    return {"connections": conns, "mailboxes": boxes}
