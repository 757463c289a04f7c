"""Actors for the flow-control tests: a pipeline of three, and a fast sender to a slow one.

They live in an importable module so that procs unpickle them by reference.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from regency.actor import Actor, concurrent_endpoint, endpoint
from regency.testing import flow_stats


class Counter(Actor):
    """The end of the pipeline: counts, and tells the producer once it has seen ``enough``."""

    def __init__(self, enough: int) -> None:
        self.seen = 0
        self.enough = enough
        self.producer: Any = None

    @endpoint
    async def set_producer(self, producer: Any) -> None:
        self.producer = producer

    @endpoint
    async def take(self, x: int) -> None:
        self.seen += 1
        if self.seen == self.enough:
            self.producer.enough.broadcast(self.seen)

    @endpoint
    async def count(self) -> int:
        return self.seen


class Stage(Actor):
    """The middle of the pipeline: forwards what it gets, from an async endpoint."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer

    @endpoint
    async def forward(self, x: int) -> None:
        self.consumer.take.broadcast(x)


class Producer(Actor):
    """Casts to the stage as fast as its loop goes, until the consumer says it has enough."""

    def __init__(self, stage: Any) -> None:
        self.stage = stage
        self.told: int | None = None

    @concurrent_endpoint
    async def run(self) -> tuple[int, int]:
        """Returns (messages sent, the consumer's count when it said so)."""
        sent = 0
        while self.told is None:
            self.stage.forward.broadcast(sent)
            sent += 1
            await asyncio.sleep(0)
        return sent, self.told

    @endpoint
    async def enough(self, seen: int) -> None:
        self.told = seen


class Flooder(Actor):
    """Casts ``n`` payloads to a slow receiver from an async endpoint, never waiting."""

    @endpoint
    async def flood(self, target: Any, n: int, size: int) -> tuple[Any, ...]:
        """Returns this proc's flow statistics, then the receiver's count and statistics
        (asked after the last message, so answered after it was handled)."""
        payload = b"x" * size
        await target.stats.call_one()  # connected: what waits for a connection is not counted
        for _ in range(n):
            target.take.broadcast(payload)
            await asyncio.sleep(0)
        mine = flow_stats()
        return (mine, *await target.stats.call_one())


class SyncFlooder(Actor):
    """The same from a sync endpoint (its own thread, which blocks while there is no room)."""

    @endpoint
    def flood(self, target: Any, n: int, size: int) -> tuple[Any, ...]:
        """As :meth:`Flooder.flood`."""
        payload = b"x" * size
        target.stats.call_one().get()  # connected, as above
        for _ in range(n):
            target.take.broadcast(payload)
        mine = flow_stats()
        return (mine, *target.stats.call_one().get())


class Slow(Actor):
    """A receiver slower than any sender: each message costs it a little time."""

    def __init__(self) -> None:
        self.seen = 0

    @endpoint
    def take(self, payload: bytes) -> None:
        self.seen += 1
        time.sleep(0.0005)  # the work: slower than a sender that does nothing else

    @endpoint
    def stats(self) -> tuple[int, dict[str, Any]]:
        return self.seen, flow_stats()
