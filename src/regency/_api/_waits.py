"""Calls that wait on each other: a cycle of endpoint calls raises instead of hanging.

An actor handles one message at a time (``@concurrent_endpoint`` bodies aside), so an
endpoint that waits on a call which, through other actors, waits on a call back to its own
actor can never return: A's ``ping`` waits for B's ``pong``, which waits for A's ``echo``,
queued behind ``ping``. The self-call (A waits on A) is refused at the wait (``_endpoint``);
longer cycles are found here, with probes along the wait-for graph (ADR 0035).

* A handler's wait without a timeout on a call (``Future.get`` on an actor's thread, or
  ``await`` in the handler's own task) that is still unanswered after
  ``deadlock_probe_after`` seconds is written into its message context (``waits``) and
  *probed*: a ``WaitProbe`` goes to each member that has not answered, then again at
  doubling intervals while the wait lasts. A wait with a timeout ends by itself and is not
  probed; neither are waits of tasks or threads the handler started.
* A runtime that receives a probe finds the member's actor and the handler the call waits on:
  the one running that call, or, when the call has not started, the serial handler it is
  queued behind. A call that has already started and ended (its port is among the actor's
  recently started ones) is no wait: the probe stops there, as it does at an idle actor, a
  handler that waits on nothing, or a handler it passed already. Otherwise it goes on along
  each wait of that handler.
* A probe that comes back to the handler that sent it, still waiting on the same call, has
  gone round a cycle. The wait of the cycle's smallest handler (``Node`` order: one with a
  caller first) fails with a ``RuntimeError`` naming every call of the cycle (``WaitCycle``
  to its runtime): one victim, whichever member found the cycle. Its endpoint raises (or
  handles it) and ends, and the rest of the cycle unwinds.

Every edge followed is a wait that exists when the probe passes, and a wait of a cycle
without a timeout never ends on its own, so a reported cycle is real; the last handler to
block finds it one ``deadlock_probe_after`` after it blocked.
"""

from __future__ import annotations

import asyncio
import collections
import logging
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

__all__ = ["RecentPorts", "WaitCycle", "WaitProbe", "install", "wait_watched", "watch_await"]

log = logging.getLogger("regency")

_MAX_HOPS = 64  # a probe that went this far without coming back is dropped
_MAX_INTERVAL = 60.0  # s between probes of a wait that lasts

Node = tuple[bool, str, int, str]
"""A handler in the wait-for graph: (it answers no caller, mesh uid, global rank, slot: "" for
an actor's serial handler, else the reply port of the concurrent body). Ordered: the
smallest node of a cycle is the one whose wait fails (a handler with a caller first)."""

Hop = tuple[Node, str, PortRef]
"""A handler a probe passed: its node, its runtime's address, the call it waits on there."""


@system_message("wait_probe")
@dataclass(slots=True)
class WaitProbe(SystemMessage):
    """Along the wait-for graph: is member ``rank`` of mesh ``uid`` held up, in handling the
    call on ``call_port`` or in a handler that call is queued behind, by a wait of its own?
    (No field is called ``port``: an undeliverable system message with one is answered
    there, and this one's is somebody's call.)"""

    uid: str  # the actor the last handler waits on: its mesh
    rank: int  # and global rank
    call_port: PortRef  # the call it waits on, as its message carries it
    hops: tuple[Hop, ...]  # the handlers passed, the first one the probe's origin
    steps: tuple[str, ...]  # what waits on what, one line each, for the report


@system_message("wait_cycle")
@dataclass(slots=True)
class WaitCycle(SystemMessage):
    """To the runtime of the smallest handler of a cycle: fail its wait on ``call_port``."""

    uid: str
    rank: int
    call_port: PortRef  # the call that handler waits on
    steps: tuple[str, ...]


class RecentPorts:
    """A bounded set of call ports, the oldest forgotten first: the last calls from actors a
    member started (a probe for one of them finds a call that already ran, not one still
    queued), or the calls cancelled before they started (``_cancel``)."""

    __slots__ = ("_ports", "size")

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._ports: collections.OrderedDict[PortRef, None] = collections.OrderedDict()

    def add(self, port: PortRef) -> None:
        ports = self._ports
        ports[port] = None
        if len(ports) > self.size:
            ports.popitem(last=False)

    def __contains__(self, port: object) -> bool:
        return port in self._ports

    def discard(self, port: PortRef) -> None:
        self._ports.pop(port, None)


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
    """``c.wait(timeout)`` on an actor's thread: a wait without a timeout that lasts is
    probed (one with a timeout ends by itself, cycle or not). False on timeout."""
    ctx = _message_context(call) if timeout is None else None
    after = _probe_after() if ctx is not None else 0.0
    if after <= 0 or ctx is None:
        return c.wait(timeout)
    if c.wait(after):
        return True
    ctx.waits.append(call)
    try:
        interval = after
        while True:
            _send_probes(ctx, call)
            if c.wait(interval):
                return True
            interval = min(interval * 2, _MAX_INTERVAL)
    finally:
        ctx.waits.remove(call)


def watch_await(c: Completion, call: Any) -> Generator[Any, None, Any]:
    """``await`` of a call's future: by a handler's own task (not one it started, nor
    ``asyncio.wait_for``'s), a wait that lasts is probed."""
    ctx = _message_context(call)
    if ctx is None or ctx.task is None or ctx.task is not asyncio.current_task():
        return (yield from c.as_asyncio().__await__())
    after = _probe_after()
    if after <= 0:
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
    _forward(call.rt, ctx, _node(ctx), call, (), ())


def _node(ctx: MessageContext) -> Node:
    slot = "" if not ctx.concurrent else repr(ctx.port)
    return (ctx.port is None, ctx.actor_instance.mesh_uid, ctx.global_rank, slot)


def _forward(rt: Runtime, ctx: MessageContext, node: Node, call: Any, hops: tuple[Hop, ...],
             steps: tuple[str, ...]) -> None:
    """Send a probe for each member ``call`` (waited on by ``ctx``'s handler) still owes."""
    port = (call.contact, call.port_id)  # as the call carries it
    hops = (*hops, (node, rt.contact, port))
    step = f"{_who(ctx)} waits for {call.label}"
    expected = call.expected
    dead = rt.dead_addrs
    for rank, addr in zip(call.route.ranks, call.route.addrs):
        if rank in expected and addr not in dead:
            probe = WaitProbe(call.uid, rank, port, hops, (*steps, f"{step} on rank {rank}"))
            _send(rt, addr, probe)


def _send(rt: Runtime, addr: str, msg: SystemMessage) -> None:
    try:
        rt.send_sys(addr, msg)
    except Exception:  # a probe is advice: a peer we cannot reach is not a cycle
        log.debug("regency: %s to %s not sent", msg.KIND, addr, exc_info=True)


def _who(ctx: MessageContext) -> str:
    inst = ctx.actor_instance
    return f"{inst.mesh_uid}.{ctx.endpoint}() on rank {ctx.global_rank}"


# -- probes --------------------------------------------------------------------------------------
def on_probe(rt: Runtime, msg: WaitProbe) -> None:
    """A probe reached this runtime (loop thread): follow it, or close the cycle."""
    behavior = _behavior(rt, msg.uid, msg.rank)
    if behavior is None or len(msg.hops) >= _MAX_HOPS:
        return
    handler, queued = _holder(behavior, msg.call_port)
    if handler is None:
        return
    port, waits = handler.port, list(handler.waits)
    if (handler, queued) != _holder(behavior, msg.call_port) or handler.port != port:
        return  # it moved on while we looked (a sync actor reuses its message context)
    steps = msg.steps
    if queued:
        steps = (*steps[:-1], f"{steps[-1]}, which cannot start before {_who(handler)} returns")
    node = _node(handler)
    nodes = [hop[0] for hop in msg.hops]
    if node == nodes[0]:
        if any(call.port_id == msg.hops[0][2][1] for call in waits):  # still that wait
            _closed(rt, msg.hops, steps)
    elif node not in nodes:  # a cycle that does not pass the origin is found by its own
        for call in waits:
            _forward(rt, handler, node, call, msg.hops, steps)


def _closed(rt: Runtime, hops: tuple[Hop, ...], steps: tuple[str, ...]) -> None:
    """A probe came back to its origin: the wait of the cycle's smallest handler fails (the
    same one whichever member found the cycle first)."""
    first = hops.index(min(hops))
    (_, uid, rank, _), addr, port = hops[first]
    _send(rt, addr, WaitCycle(uid, rank, port, steps[first:] + steps[:first]))  # its wait first


def on_cycle(rt: Runtime, msg: WaitCycle) -> None:
    """Fail the wait of this runtime's handler named in ``msg``, if it still waits."""
    behavior = _behavior(rt, msg.uid, msg.rank)
    if behavior is None:
        return
    contact, port_id = msg.call_port
    for handler in (behavior.current, *behavior.bodies.values()):
        for call in list(handler.waits) if handler is not None else ():
            if call.port_id == port_id and contact == call.contact:
                call.fail(RuntimeError(_report(call.label, msg.steps)))


def _behavior(rt: Runtime, uid: str, rank: int) -> ActorBehavior | None:
    cell = rt.cells.get(uid)
    behavior: ActorBehavior | None = getattr(cell, "behavior", None)
    return behavior if behavior is not None and behavior.g == rank else None


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


def _report(label: str, steps: tuple[str, ...]) -> str:
    lines = ";\n  ".join(steps)
    return (f"{label}: deadlock: these endpoint calls wait on each other and none can "
            f"return (an actor handles one message at a time):\n  {lines}.\n"
            "Do not wait for the call inside the endpoint (send it, or return its Future), "
            "or make the endpoint that waits a @concurrent_endpoint of an async actor (its "
            "actor then takes other messages while it waits).")


def install(rt: Runtime) -> None:
    """Answer probes, and the news of a cycle, in ``rt``."""
    rt.handle(WaitProbe, lambda msg: on_probe(rt, msg))
    rt.handle(WaitCycle, lambda msg: on_cycle(rt, msg))
