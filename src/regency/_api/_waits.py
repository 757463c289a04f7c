"""Calls that wait on each other: a cycle of endpoint calls raises instead of hanging.

An actor handles one message at a time (``@concurrent_endpoint`` bodies aside), so an
endpoint that waits on a call which, through other actors, waits on a call back to its own
actor can never return: A's ``ping`` waits for B's ``pong``, which waits for A's ``echo``,
queued behind ``ping``. The self-call (A waits on A) is refused at the wait (``_endpoint``);
longer cycles are found here, with probes along the wait-for graph (ADR 0035).

* A handler's wait on a call (``Future.get`` on an actor's thread, ``await`` in an async
  actor) that is still unanswered after ``deadlock_probe_after`` seconds is written into its
  message context (``waits``) and *probed*: a ``WaitProbe`` goes to each member that has not
  answered, then again at doubling intervals while the wait lasts. Waits that end sooner cost
  nothing here.
* A runtime that receives a probe finds the member's actor and the handler the call waits on:
  the one running that call, or, when the call has not started, the serial handler it is
  queued behind. A call that has already started and ended (its port is among the actor's
  recently started ones) is no wait: the probe stops there, as it does at an idle actor or a
  handler that waits on nothing. Otherwise it goes on along each wait of that handler.
* A probe that comes back to the handler that sent it, still waiting on the same call, has
  gone round a cycle: that call fails with a ``RuntimeError`` naming every call in it. The
  failed wait raises in the endpoint, which then ends (or handles it), and the rest of the
  cycle unwinds.

Every edge followed is a wait that exists when the probe passes, and a wait in a cycle never
ends on its own, so a reported cycle is real; the last handler to block finds it one
``deadlock_probe_after`` after it blocked.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import config
from .._runtime._completion import Completion
from .._runtime._runtime import Runtime
from .._wire._messages import PortRef, SystemMessage, system_message
from ._context import _current

if TYPE_CHECKING:
    from ._behavior import ActorBehavior, MessageContext

__all__ = ["Started", "WaitProbe", "install", "wait_watched", "watch_await"]

log = logging.getLogger("regency")

_MAX_HOPS = 64  # a probe that went this far without coming back is dropped
_MAX_INTERVAL = 60.0  # s between probes of a wait that lasts


@system_message("wait_probe")
@dataclass(slots=True)
class WaitProbe(SystemMessage):
    """Along the wait-for graph: is member ``rank`` of mesh ``uid`` held up, in handling the
    call on ``port`` or in a handler that call is queued behind, by a wait of its own?"""

    uid: str  # the actor the last handler waits on: its mesh
    rank: int  # and global rank
    port: PortRef  # the call it waits on, as its message carries it
    origin: tuple[str, int, int]  # the handler that sent it: (mesh uid, global rank, port id
    #                               of the call it waits on)
    path: tuple[str, ...]  # what waits on what so far, one step each, for the report


class Started:
    """The ports of the last calls from actors a member started (a bounded set): a probe
    for one of them finds a call that already ran, not one still queued."""

    __slots__ = ("_ports", "size")

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._ports: collections.OrderedDict[PortRef, None] = collections.OrderedDict()

    def add(self, port: PortRef) -> None:
        ports = self._ports
        ports[port] = None
        if len(ports) > self.size:
            ports.popitem(last=False)

    def __contains__(self, port: object) -> bool:
        return port in self._ports


# -- waiting -------------------------------------------------------------------------------------
def _probe_after() -> float:
    return float(config.get("deadlock_probe_after"))


def _message_context(call: Any) -> MessageContext | None:
    """The context of the serial or concurrent handler this thread or task runs, when
    ``call`` (a call's collector) can be probed from it."""
    ctx = _current.get(None)
    if getattr(ctx, "waits", None) is None or getattr(call, "port_id", None) is None:
        return None  # not in a handler (a MessageContext), or a call without a port
    return ctx  # type: ignore[return-value]


def wait_watched(c: Completion, call: Any, timeout: float | None) -> bool:
    """``c.wait(timeout)`` on an actor's thread: a wait that lasts is probed. False on
    timeout."""
    ctx = _message_context(call)
    after = _probe_after() if ctx is not None else 0.0
    if after <= 0 or ctx is None:
        return c.wait(timeout)
    first = after if timeout is None else min(after, timeout)
    if c.wait(first):
        return True
    end = None if timeout is None else time.monotonic() + timeout - first
    ctx.waits.append(call)
    try:
        interval = after
        while True:
            _send_probes(ctx, call)
            step = interval if end is None else min(interval, end - time.monotonic())
            if step <= 0:
                return False
            if c.wait(step):
                return True
            interval = min(interval * 2, _MAX_INTERVAL)
    finally:
        ctx.waits.remove(call)


def watch_await(c: Completion, call: Any) -> Generator[Any, None, Any]:
    """``await`` of a call's future: in an actor's handler, a wait that lasts is probed."""
    ctx = _message_context(call)
    after = _probe_after() if ctx is not None else 0.0
    if after <= 0 or ctx is None:
        return (yield from c.as_asyncio().__await__())
    watch = _AsyncWatch(ctx, call, after)
    try:
        return (yield from c.as_asyncio().__await__())
    finally:
        watch.end()


class _AsyncWatch:
    """The timer of an awaited call: after ``after`` s, probe, then again at doubling
    intervals until the call is answered."""

    __slots__ = ("call", "ctx", "interval", "listed", "timer")

    def __init__(self, ctx: MessageContext, call: Any, after: float) -> None:
        self.ctx = ctx
        self.call = call
        self.interval = after
        self.listed = False
        self.timer = asyncio.get_running_loop().call_later(after, self._probe)

    def _probe(self) -> None:
        if not self.listed:
            self.listed = True
            self.ctx.waits.append(self.call)
        _send_probes(self.ctx, self.call)
        self.interval = min(self.interval * 2, _MAX_INTERVAL)
        self.timer = asyncio.get_running_loop().call_later(self.interval, self._probe)

    def end(self) -> None:
        self.timer.cancel()
        if self.listed:
            self.ctx.waits.remove(self.call)


def _send_probes(ctx: MessageContext, call: Any) -> None:
    """Probe each member ``call`` still waits on."""
    rt: Runtime = call.rt
    origin = (ctx.actor_instance.mesh_uid, ctx.global_rank, call.port_id)
    _forward(rt, ctx, call, origin, ())


def _forward(rt: Runtime, ctx: MessageContext, call: Any, origin: tuple[str, int, int],
             path: tuple[str, ...]) -> None:
    """Send a probe for each member ``call`` (waited on by ``ctx``'s handler) still owes."""
    port = (rt.contact, call.port_id)
    route = call.route
    expected = call.expected
    step = f"{_who(ctx)} waits for {call.label}"
    for rank, addr in zip(route.ranks, route.addrs):
        if rank in expected:
            probe = WaitProbe(call.uid, rank, port, origin, (*path, f"{step} on rank {rank}"))
            try:
                rt.send_sys(addr, probe)
            except Exception:  # a probe is advice: a peer we cannot reach is not a cycle
                log.debug("regency: wait probe to %s not sent", addr, exc_info=True)


def _who(ctx: MessageContext) -> str:
    inst = ctx.actor_instance
    return f"{inst.mesh_uid}.{ctx.endpoint}() on rank {ctx.global_rank}"


# -- probes --------------------------------------------------------------------------------------
def on_probe(rt: Runtime, msg: WaitProbe) -> None:
    """A probe reached this runtime (loop thread): follow it, or close the cycle."""
    cell = rt.cells.get(msg.uid)
    behavior: ActorBehavior | None = getattr(cell, "behavior", None)
    if behavior is None or behavior.g != msg.rank or len(msg.path) >= _MAX_HOPS:
        return
    handler, queued = _holder(behavior, msg.port)
    if handler is None:
        return
    waits = list(handler.waits)
    if (handler, queued) != _holder(behavior, msg.port):
        return  # it moved on while we looked (a sync actor reuses its message context)
    path = msg.path
    if queued:
        path = (*path[:-1], f"{path[-1]}, which cannot start before {_who(handler)} returns")
    uid, rank, first = msg.origin
    if (uid, rank) == (msg.uid, msg.rank):
        for call in waits:
            if call.port_id == first:
                call.fail(RuntimeError(_report(call.label, path)))
        return  # the origin's own actor, but another handler or wait: not this cycle
    for call in waits:
        _forward(rt, handler, call, msg.origin, path)


def _holder(behavior: ActorBehavior, port: PortRef) -> tuple[MessageContext | None, bool]:
    """The handler a call to ``behavior``'s actor waits on (and whether it waits *behind*
    it, queued), or None when it waits on no handler that waits: it ran already, or its
    actor is idle."""
    current = behavior.current
    if current is not None and current.port == port:
        return current, False
    body = behavior.bodies.get(port)
    if body is not None:
        return body, False
    if port in behavior.started:
        return None, False  # it ran (or runs as a body that has not registered yet)
    return current, True


def _report(label: str, path: tuple[str, ...]) -> str:
    steps = ";\n  ".join(path)
    return (f"{label}: deadlock: these endpoint calls wait on each other and none can "
            f"return (an actor handles one message at a time):\n  {steps}.\n"
            "Do not wait for the call inside the endpoint (send it, or return its Future), "
            "or make the endpoint that waits a @concurrent_endpoint of an async actor (its "
            "actor then takes other messages while it waits).")


def install(rt: Runtime) -> None:
    """Answer probes in ``rt``."""
    rt.handle(WaitProbe, lambda msg: on_probe(rt, msg))
