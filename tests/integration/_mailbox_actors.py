"""Actors for ``test_mailbox_limit`` (importable by procs)."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from _borrow_actors import _gate  # per process: shared by the actors of one proc
from _cancel_actors import _LOG, Opener

from regency.actor import Actor, MailboxLimit, endpoint
from regency.testing import flow_stats


class Refusing(Actor):
    """A sync actor whose mailbox holds 2 calls; more are refused."""

    __mailbox_limit__ = MailboxLimit(max_messages=2, when_full="raise")

    @endpoint
    def block(self, tag: str) -> str:
        _LOG.append(f"{tag} started")
        _gate(tag).wait(60)
        return tag

    @endpoint
    def record(self, tag: str) -> str:
        _LOG.append(tag)
        return tag


class RefusingAsync(Actor):
    """The same, async: waits on its gate without holding the loop."""

    __mailbox_limit__ = MailboxLimit(max_messages=2, when_full="raise")

    @endpoint
    async def block(self, tag: str) -> str:
        _LOG.append(f"{tag} started")
        while not _gate(tag).is_set():
            await asyncio.sleep(0.005)
        return tag

    @endpoint
    async def record(self, tag: str) -> str:
        _LOG.append(tag)
        return tag


class RefusingBytes(Refusing):
    """A mailbox of 1000 bytes at most: a lone large call goes in, a second is refused."""

    __mailbox_limit__ = MailboxLimit(max_bytes=1000, when_full="raise")

    @endpoint
    def length(self, data: bytes) -> int:
        return len(data)


class _Tee:
    """The proc's stderr, with a copy of what is written to it."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.copy: list[str] = []

    def write(self, text: str) -> int:
        self.copy.append(text)
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class Gates(Opener):
    """Another actor of a proc: opens gates, reads the proc's log (an ``Opener``) and its
    stderr."""

    @endpoint
    def said(self) -> str:
        """What the proc wrote on stderr since the first time this was asked."""
        if not isinstance(sys.stderr, _Tee):
            sys.stderr = _Tee(sys.stderr)
        return "".join(sys.stderr.copy)


class SlowBlocking(Actor):
    """A slow receiver whose mailbox holds 8 calls at most: past that, its senders wait."""

    __mailbox_limit__ = MailboxLimit(max_messages=8, when_full="block")

    def __init__(self) -> None:
        self.seen: list[int] = []

    @endpoint
    def take(self, n: int, payload: bytes) -> None:
        self.seen.append(n)
        time.sleep(0.0005)  # slower than a sender that does nothing else

    @endpoint
    def stats(self) -> tuple[list[int], dict[str, Any]]:
        return self.seen, flow_stats()


class Sender(Actor):
    """Broadcasts ``n`` numbered payloads to ``target`` from a sync endpoint, never waiting
    for an answer (its thread blocks while there is no room)."""

    @endpoint
    def flood(self, target: Any, n: int, size: int) -> tuple[Any, ...]:
        payload = b"x" * size
        target.stats.call_one().get()  # connected: what waits for a connection is not counted
        for i in range(n):
            target.take.broadcast(i, payload)
        return (flow_stats(), *target.stats.call_one().get())
