"""Cancelling a call: ``Future.cancel()`` ends the caller's wait and stops the remote work.

A call's future can be cancelled while it is not done (ADR 0036). On the caller, the future
completes at once with ``concurrent.futures.CancelledError``, its reply port closes (a reply
that still comes is dropped), and a ``CancelCall`` goes to each member that has not answered.
A member's runtime, on its loop thread, then stops the call as far as Python allows:

* a call still in the actor's mailbox (or in a stopped actor's, still draining) is skipped
  when its turn comes (its port goes into the behavior's ``cancelled``, a bounded set: a
  port that never comes costs one slot); one held for an actor not spawned there yet is
  dropped;
* an async endpoint running it (the serial handler, or a ``@concurrent_endpoint`` body) gets
  ``asyncio.CancelledError`` at its ``await``; its ``except``/``finally`` blocks run, and the
  actor takes its next message;
* a sync endpoint running it cannot be interrupted: it runs to its end (``context().
  cancelled`` tells it) and its reply is dropped.

A ``stream()`` call is cancelled as a whole (``ValueStream.cancel``): its futures that are
not resolved fail, and the members that have not answered are told. Futures that are not
of one call (``completed``, ``stop()``, one of a stream's, the tensor engine's) are not
cancelled: ``cancel()`` returns False, as it does for a future done otherwise than by
``cancel()``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._runtime._runtime import Runtime
from .._wire._messages import PortRef, SystemMessage, system_message
from ._future import CallCancelled

if TYPE_CHECKING:
    from ._behavior import ActorBehavior

__all__ = ["CancelCall", "cancel_call", "install"]

log = logging.getLogger("regency")


@system_message("cancel_call")
@dataclass(slots=True)
class CancelCall(SystemMessage):
    """To a member's runtime: stop the call whose reply goes to ``call_port``, queued or
    running, at member ``rank`` of mesh ``uid``. (No field is called ``port``: an
    undeliverable system message with one is answered there.)"""

    uid: str
    rank: int
    call_port: PortRef


def cancel_call(call: Any, error: BaseException | None = None) -> bool:
    """Cancel the call of ``call`` (its collector): fail its future with ``error``
    (``CancelledError`` by default; ``DeadlineExceeded`` at a deadline) and tell the members
    that still owe an answer. False when it was done already, or is not a call that can be
    cancelled."""
    if not getattr(call, "cancellable", False) or not call.pending():
        return False
    # The members are told first: once the future fails, a later message from any thread
    # to them goes after the cancel. (A reply that comes meanwhile makes it a cancel sent
    # for nothing: the member skips nothing, answered already.)
    rt = call.rt
    expected = call.expected
    port = (call.contact, call.port_id)  # as the call carries it
    dead = rt.dead_addrs
    for rank, addr in zip(call.route.ranks, call.route.addrs):
        if rank in expected and addr not in dead:
            try:
                rt.send_sys(addr, CancelCall(call.uid, rank, port))
            except Exception:  # the member is gone: its call is too
                log.debug("regency: cancel of %s to %s not sent", call.label, addr,
                          exc_info=True)
    if error is None:
        error = CallCancelled(f"{call.label} was cancelled")
    return bool(call.cancel(error))  # False: answered (or failed) first


def on_cancel(rt: Runtime, msg: CancelCall) -> None:
    """Stop the call named in ``msg`` at this runtime's member (loop thread)."""
    cell = rt.cells.get(msg.uid)
    if cell is None:  # not spawned here yet: the call waits among the held messages
        held = rt.held.get(msg.uid)
        if held:
            held[:] = [(call, frame) for call, frame in held if call.port != msg.call_port]
        return
    # a live cell's behavior, or that of a stopped actor whose cell still runs what it had
    behavior: ActorBehavior | None = (getattr(cell, "behavior", None)
                                      or getattr(cell, "draining", None))
    if behavior is None or behavior.g != msg.rank:
        return  # not this member, or an actor stopped and done: nothing runs it
    behavior.cancel(msg.call_port)


def install(rt: Runtime) -> None:
    """Answer ``CancelCall`` in ``rt``."""
    rt.handle(CancelCall, lambda msg: on_cancel(rt, msg))
