"""Actor classes used by ``workloads_actor`` (regency and Monarch).

They live in an importable module (not ``__main__``) so that spawned procs unpickle them by
reference. The actor API is picked from the ``BENCH_FRAMEWORK`` environment variable
(``regency`` or ``monarch``), which the workload subprocess sets and its procs inherit.
"""

from __future__ import annotations

import importlib
import os
import time
from typing import Any

api = importlib.import_module(f"{os.environ.get('BENCH_FRAMEWORK', 'regency')}.actor")
Actor = api.Actor
endpoint = api.endpoint


def _make_array(size_bytes: int) -> Any:
    import numpy as np

    return np.ones(size_bytes, dtype=np.uint8)


class SyncPinger(Actor):
    """Sync actor: echo-style endpoints, all plain ``def``."""

    @endpoint
    def ping(self, x: Any) -> Any:
        return x

    @endpoint
    def echo(self, x: Any) -> Any:
        return x

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def say(self, x: Any) -> Any:
        print(f"said {x}")
        return x


class AsyncPinger(Actor):
    """Async actor: the same endpoints as ``async def``."""

    @endpoint
    async def ping(self, x: Any) -> Any:
        return x

    @endpoint
    async def pid(self) -> int:
        return os.getpid()


class SyncCaller(Actor):
    """Sync actor that drives calls to another actor mesh (with ``.get()``)."""

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def call_seq(self, target: Any, m: int) -> float:
        start = time.perf_counter()
        for i in range(m):
            target.ping.call_one(i).get()
        return time.perf_counter() - start

    @endpoint
    def call_pipelined(self, target: Any, m: int) -> float:
        start = time.perf_counter()
        futs = [target.ping.call_one(i) for i in range(m)]
        for fut in futs:
            fut.get()
        return time.perf_counter() - start

    @endpoint
    def echo_numpy(self, target: Any, size_bytes: int, iters: int) -> list[float]:
        """Echo a fresh numpy array through ``target.echo``; return per-iteration seconds."""
        payload = _make_array(size_bytes)
        target.echo.call_one(b"warmup").get()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            out = target.echo.call_one(payload).get()
            times.append(time.perf_counter() - t0)
            assert out.nbytes == size_bytes
            del out
        return times


class AsyncCaller(Actor):
    """Async actor that drives calls to another actor mesh (with ``await``)."""

    @endpoint
    async def pid(self) -> int:
        return os.getpid()

    @endpoint
    async def call_seq(self, target: Any, m: int) -> float:
        start = time.perf_counter()
        for i in range(m):
            await target.ping.call_one(i)
        return time.perf_counter() - start

    @endpoint
    async def call_pipelined(self, target: Any, m: int) -> float:
        start = time.perf_counter()
        futs = [target.ping.call_one(i) for i in range(m)]
        for fut in futs:
            await fut
        return time.perf_counter() - start


class PipeConsumer(Actor):
    """The end of the ``pipeline`` workload: counts, noting the time every 100 messages."""

    def __init__(self) -> None:
        self.seen = 0
        self.marks: list[tuple[int, float]] = []

    @endpoint
    async def take(self, x: Any) -> None:
        self.seen += 1
        if self.seen % 100 == 0:
            self.marks.append((self.seen, time.time()))

    @endpoint
    async def report(self) -> tuple[int, list[tuple[int, float]]]:
        return self.seen, self.marks


class PipeStage(Actor):
    """The middle of the ``pipeline`` workload: forwards from an async endpoint."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer

    @endpoint
    async def ready(self) -> int:
        return 1

    @endpoint
    async def forward(self, x: Any) -> None:
        self.consumer.take.broadcast(x)


class PipeProducer(Actor):
    """The head of the ``pipeline`` workload: casts to the stage as fast as its loop goes."""

    def __init__(self, stage: Any) -> None:
        self.stage = stage

    @endpoint
    async def run(self, seconds: float) -> tuple[int, float, float]:
        """Returns (messages sent, start, end) (wall-clock times, comparable across procs)."""
        import asyncio

        start = time.time()
        end = start + seconds
        sent = 0
        while time.time() < end:
            self.stage.forward.broadcast(sent)
            sent += 1
            await asyncio.sleep(0)
        return sent, start, time.time()
