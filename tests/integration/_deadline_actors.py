"""Actors for ``test_deadlines`` (importable by procs)."""

from __future__ import annotations

import time
from typing import Any

from _borrow_actors import _gate  # per process: shared by the actors of one proc
from _cancel_actors import _LOG

from regency.actor import Actor, context, deadline, endpoint
from regency.errors import DeadlineExceeded


class Timed(Actor):
    """A sync actor that tells the deadline of its calls and blocks at gates."""

    @endpoint
    def left(self) -> float | None:
        return context().time_remaining()

    @endpoint
    def block(self, tag: str) -> str:
        """Wait until an ``Opener`` of its proc opens gate ``tag``; log what it saw."""
        _LOG.append(f"{tag} started")
        _gate(tag).wait(60)
        _LOG.append(f"{tag} ended, cancelled={context().cancelled}")
        return tag

    @endpoint
    def work(self, tag: str) -> str:
        """Work in steps (60 s at most) until its caller gives up on the call."""
        _LOG.append(f"{tag} started")
        limit = time.monotonic() + 60
        while time.monotonic() < limit:
            if context().cancelled:
                _LOG.append(f"{tag} noticed")
                return "cancelled"
            time.sleep(0.005)
        return "not cancelled"

    @endpoint
    def record(self, tag: str) -> str:
        _LOG.append(tag)
        return tag

    @endpoint
    def ask(self, peer: Any) -> tuple[float | None, float | None]:
        """(its own time left, the time left ``peer`` sees in a call it sends now)."""
        own = context().time_remaining()
        return own, peer.left.call_one().get(timeout=30)

    @endpoint
    def ask_free(self, peer: Any) -> float | None:
        """The time left ``peer`` sees in a call sent under ``deadline(None)``."""
        with deadline(None):
            return peer.left.call_one().get(timeout=30)

    @endpoint
    def late_broadcast(self, peer: Any, tag: str) -> None:
        """Broadcast past a deadline (as an endpoint that ran past its call's does)."""
        with deadline(0):
            peer.record.broadcast(f"{tag} sent late")
        _LOG.append(f"{tag} went on")

    def __cleanup__(self, exc: BaseException | None) -> None:
        _LOG.append(f"cleanup time_remaining={context().time_remaining()}")

    @endpoint
    def ask_blocked(self, peer: Any, tag: str) -> str:
        """Call ``peer.block(tag)``: the deadline inherited from this call ends it."""
        try:
            outcome = peer.block.call_one(tag).get(timeout=60)
        except DeadlineExceeded as exc:
            outcome = f"DeadlineExceeded: {exc}"
        _LOG.append(f"{tag} nested: {outcome.split(':')[0]}")
        return outcome
