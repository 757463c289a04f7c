"""The same workloads as ``workloads_actor``, written for Ray.

Mapping: one Ray actor = one proc with one actor; ``call_one(x).get()`` =
``ray.get(a.ping.remote(x))``; broadcast+gather = call the method on N actors and ``ray.get``
the list; stopping = ``ray.kill`` on every actor. Actors request ``num_cpus=0`` so that 16 of
them fit on a 2-core machine, and async actors use ``max_concurrency=1`` to match Monarch's
one-message-at-a-time actors.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import psutil
import ray

from benchmarks._common import (
    ECHO_WARMUP,
    MIB,
    Metrics,
    Params,
    Workload,
    burst_rate,
    gb_per_s,
    latency_metrics,
    timed_loop,
)

EXIT_WAIT_S = 30.0


# ----------------------------------------------------------------------------- actors


@ray.remote(num_cpus=0)
class SyncPinger:
    def ping(self, x: Any) -> Any:
        return x

    def echo(self, x: Any) -> Any:
        return x

    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0, max_concurrency=1)
class AsyncPinger:
    async def ping(self, x: Any) -> Any:
        return x

    async def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
class SyncCaller:
    def pid(self) -> int:
        return os.getpid()

    def call_seq(self, target: Any, m: int) -> float:
        start = time.perf_counter()
        for i in range(m):
            ray.get(target.ping.remote(i))
        return time.perf_counter() - start

    def call_pipelined(self, target: Any, m: int) -> float:
        start = time.perf_counter()
        ray.get([target.ping.remote(i) for i in range(m)])
        return time.perf_counter() - start

    def echo_numpy(self, target: Any, size_bytes: int, iters: int) -> list[float]:
        import numpy as np

        payload = np.ones(size_bytes, dtype=np.uint8)
        ray.get(target.echo.remote(b"warmup"))
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            out = ray.get(target.echo.remote(payload))
            times.append(time.perf_counter() - t0)
            assert out.nbytes == size_bytes
            del out
        return times


@ray.remote(num_cpus=0, max_concurrency=1)
class AsyncCaller:
    async def pid(self) -> int:
        return os.getpid()

    async def call_seq(self, target: Any, m: int) -> float:
        start = time.perf_counter()
        for i in range(m):
            await target.ping.remote(i)
        return time.perf_counter() - start

    async def call_pipelined(self, target: Any, m: int) -> float:
        start = time.perf_counter()
        refs = [target.ping.remote(i) for i in range(m)]
        for ref in refs:
            await ref
        return time.perf_counter() - start


@ray.remote(num_cpus=0, max_concurrency=1)
class PipeConsumer:
    """The end of the ``pipeline`` workload: counts, noting the time every 100 messages."""

    def __init__(self) -> None:
        self.seen = 0
        self.marks: list[tuple[int, float]] = []

    async def take(self, x: Any) -> None:
        self.seen += 1
        if self.seen % 100 == 0:
            self.marks.append((self.seen, time.time()))

    async def report(self) -> tuple[int, list[tuple[int, float]]]:
        return self.seen, self.marks


@ray.remote(num_cpus=0, max_concurrency=1)
class PipeStage:
    """The middle of the ``pipeline`` workload: forwards from an async method."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer

    async def ready(self) -> int:
        return 1

    async def forward(self, x: Any) -> None:
        self.consumer.take.remote(x)  # fire and forget, as ``broadcast``


@ray.remote(num_cpus=0, max_concurrency=1)
class PipeProducer:
    """The head of the ``pipeline`` workload: sends to the stage as fast as its loop goes."""

    def __init__(self, stage: Any) -> None:
        self.stage = stage

    async def run(self, seconds: float) -> tuple[int, float, float]:
        import asyncio

        start = time.time()
        end = start + seconds
        sent = 0
        while time.time() < end:
            self.stage.forward.remote(sent)
            sent += 1
            await asyncio.sleep(0)
        return sent, start, time.time()


# ----------------------------------------------------------------------------- helpers


def _kill(actors: list[Any]) -> None:
    for actor in actors:
        ray.kill(actor)


@contextmanager
def spawned_list(n: int, cls: Any) -> Iterator[list[Any]]:
    """Start ``n`` actors of ``cls`` (one process each) and wait until all answer."""
    actors = [cls.remote() for _ in range(n)]
    try:
        ray.get([a.pid.remote() for a in actors])
        yield actors
    finally:
        _kill(actors)


@contextmanager
def spawned(cls: Any) -> Iterator[Any]:
    with spawned_list(1, cls) as actors:
        yield actors[0]


def _warm_up(actor: Any, calls: int) -> None:
    for i in range(calls):
        ray.get(actor.ping.remote(i))


def wait_exit(procs: list[psutil.Process], limit_s: float = EXIT_WAIT_S) -> float:
    start = time.perf_counter()
    _, alive = psutil.wait_procs(procs, timeout=limit_s)
    if alive:
        raise TimeoutError(f"{len(alive)} actor processes still alive {limit_s:.0f} s after kill")
    return time.perf_counter() - start


# ----------------------------------------------------------------------------- workloads


def sync_rtt(p: Params) -> Metrics:
    with spawned(SyncPinger) as actor:
        _warm_up(actor, p.warmup_calls)
        samples, total = timed_loop(lambda: ray.get(actor.ping.remote(1)), p.rtt_calls,
                                    p.min_s)
    return latency_metrics(samples, total, "calls_per_s")


def pipelined(p: Params) -> Metrics:
    with spawned(SyncPinger) as actor:
        _warm_up(actor, p.warmup_calls)

        def burst() -> None:
            refs = [actor.ping.remote(i) for i in range(p.pipelined_calls)]
            for ref in refs:
                ray.get(ref)

        rate = burst_rate(burst, p.pipelined_calls, p.min_s)
    return {"calls_per_s": rate}


def _bcast_gather(n: int, p: Params) -> Metrics:
    def cast() -> list[Any]:
        return ray.get([a.ping.remote(1) for a in actors])

    with spawned_list(n, SyncPinger) as actors:
        for _ in range(5):
            cast()
        samples, total = timed_loop(cast, p.bcast_iters, p.min_s)
    return latency_metrics(samples, total, "casts_per_s")


def _actor_to_actor_kind(kind: str, caller: Any, target: Any, p: Params) -> Metrics:
    with ExitStack() as stack:
        a = stack.enter_context(spawned(caller))
        b = stack.enter_context(spawned(target))
        ray.get(a.call_seq.remote(b, 20))
        seq_s = ray.get(a.call_seq.remote(b, p.a2a_calls))
        pipe_s = ray.get(a.call_pipelined.remote(b, p.a2a_calls))
    return {
        f"{kind}_seq_calls_per_s": p.a2a_calls / seq_s,
        f"{kind}_pipelined_calls_per_s": p.a2a_calls / pipe_s,
    }


def actor_to_actor_same_proc(p: Params) -> Metrics:
    """Not in Ray: each actor is a process of its own."""
    raise NotImplementedError("Ray has no procs: each actor is a process of its own")


def actor_to_actor(p: Params) -> Metrics:
    return {
        **_actor_to_actor_kind("sync", SyncCaller, SyncPinger, p),
        **_actor_to_actor_kind("async", AsyncCaller, AsyncPinger, p),
    }


def _make_bytes(size: int) -> bytes:
    return b"\x01" * size


def _make_numpy(size: int) -> Any:
    import numpy as np

    return np.ones(size, dtype=np.uint8)


def _payload_len(x: Any) -> int:
    return x.nbytes if hasattr(x, "nbytes") else len(x)


def _echo(make: Callable[[int], Any], size_mib: int, p: Params) -> Metrics:
    size = size_mib * MIB
    payload = make(size)
    times = []
    with spawned(SyncPinger) as actor:
        ray.get(actor.echo.remote(make(1024)))
        for _ in range(ECHO_WARMUP):
            ray.get(actor.echo.remote(payload))
        for _ in range(p.echo_iterations(size_mib)):
            t0 = time.perf_counter()
            out = ray.get(actor.echo.remote(payload))
            times.append(time.perf_counter() - t0)
            assert _payload_len(out) == size, "echo returned a payload of the wrong size"
            del out
    return gb_per_s(size, times)


def a2a_echo_numpy_256MiB(p: Params) -> Metrics:
    size = 256 * MIB
    with ExitStack() as stack:
        a = stack.enter_context(spawned(SyncCaller))
        b = stack.enter_context(spawned(SyncPinger))
        times = ray.get(a.echo_numpy.remote(b, size, ECHO_WARMUP + p.echo_iterations(256)))
    return gb_per_s(size, times[ECHO_WARMUP:])


def _spawn(n: int, p: Params) -> Metrics:
    start = time.perf_counter()
    actors = [SyncPinger.remote() for _ in range(n)]
    try:
        ray.get([a.ping.remote(1) for a in actors])
        spawn_s = time.perf_counter() - start
        procs = [psutil.Process(pid) for pid in ray.get([a.pid.remote() for a in actors])]
    except BaseException:
        _kill(actors)
        raise
    start = time.perf_counter()
    _kill(actors)
    stop_s = time.perf_counter() - start
    return {"spawn_s": spawn_s, "stop_s": stop_s, "stop_exit_s": stop_s + wait_exit(procs)}


def idle_worker_mem(p: Params) -> Metrics:
    with spawned(SyncPinger) as actor:
        pid = ray.get(actor.pid.remote())
        time.sleep(1.0)
        info = psutil.Process(pid).memory_full_info()
    return {"rss_mib": info.rss / MIB, "uss_mib": info.uss / MIB}


def pipeline(p: Params) -> Metrics:
    """Producer -> stage -> consumer, three async actors (one process each); see
    ``workloads_actor.pipeline``. Ray's fire-and-forget ``.remote()`` stands for ``broadcast``."""
    consumer = PipeConsumer.remote()
    stage = PipeStage.remote(consumer)
    producer = PipeProducer.remote(stage)
    try:
        ray.get([consumer.report.remote(), stage.ready.remote()])
        sent, start, end = ray.get(producer.run.remote(p.pipeline_s), timeout=120)
        _, marks = ray.get(consumer.report.remote(), timeout=120)
    finally:
        _kill([producer, stage, consumer])
    during = max((n for n, t in marks if t <= end), default=0)
    first = next((t for n, t in marks if n >= 100), None)
    return {
        "sent_per_s": sent / (end - start),
        "received_per_s": during / (end - start),
        "first100_ms": (first - start) * 1000 if first is not None else float("nan"),
    }


def _echo_workload(make: Callable[[int], Any], size_mib: int) -> Workload:
    return lambda p: _echo(make, size_mib, p)


def _build() -> dict[str, Workload]:
    table: dict[str, Workload] = {
        "sync_rtt": sync_rtt,
        "pipelined": pipelined,
        "bcast_gather_4": lambda p: _bcast_gather(4, p),
        "bcast_gather_16": lambda p: _bcast_gather(16, p),
        "actor_to_actor": actor_to_actor,
        "actor_to_actor_same_proc": actor_to_actor_same_proc,
        "a2a_echo_numpy_256MiB": a2a_echo_numpy_256MiB,
        "spawn_4": lambda p: _spawn(4, p),
        "spawn_16": lambda p: _spawn(16, p),
        "idle_worker_mem": idle_worker_mem,
        "pipeline": pipeline,
    }
    for size in (1, 16, 256):
        table[f"echo_bytes_{size}MiB"] = _echo_workload(_make_bytes, size)
        table[f"echo_numpy_{size}MiB"] = _echo_workload(_make_numpy, size)
    return table


WORKLOADS: dict[str, Workload] = _build()


def setup() -> str:
    """Start a local Ray instance; return Ray's version."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
        object_store_memory=4 * 1024**3,
    )
    return str(ray.__version__)


def teardown() -> None:
    ray.shutdown()
