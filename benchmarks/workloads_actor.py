"""Workloads written once against the ``monarch.actor`` API; run for regency and Monarch.

The API module is chosen at import time from ``BENCH_FRAMEWORK`` (set by ``_child.py``):
``api = importlib.import_module(f"{framework}.actor")``. Every proc is spawned with
``this_host().spawn_procs(...)`` (``this_proc()`` would run actors inside the client process),
and every workload stops the proc meshes it spawned before returning.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import psutil

from benchmarks._actors import (
    AsyncCaller,
    AsyncPinger,
    PipeConsumer,
    PipeProducer,
    PipeStage,
    SyncCaller,
    SyncPinger,
)
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

FRAMEWORK = os.environ.get("BENCH_FRAMEWORK", "regency")
api = importlib.import_module(f"{FRAMEWORK}.actor")

STOP_TIMEOUT_S = 60.0
EXIT_WAIT_S = 30.0


# ----------------------------------------------------------------------------- helpers


def _stop(proc_mesh: Any) -> None:
    try:
        proc_mesh.stop().get(timeout=STOP_TIMEOUT_S)
    except Exception as exc:  # a failed stop must not hide the measurement
        print(f"[bench] warning: proc_mesh.stop() failed: {exc!r}", flush=True)


@contextmanager
def spawned(n: int, cls: type, name: str = "bench") -> Iterator[Any]:
    """Spawn ``n`` procs on this host with one ``cls`` actor each; yield the actor mesh."""
    proc_mesh = api.this_host().spawn_procs(per_host={"procs": n})
    try:
        yield proc_mesh.spawn(name, cls)
    finally:
        _stop(proc_mesh)


def _warm_up(mesh: Any, calls: int) -> None:
    for i in range(calls):
        mesh.ping.call_one(i).get()


def wait_exit(procs: list[psutil.Process], limit_s: float = EXIT_WAIT_S) -> float:
    """Seconds until every process in ``procs`` is gone (raises if some outlive ``limit_s``)."""
    start = time.perf_counter()
    _, alive = psutil.wait_procs(procs, timeout=limit_s)
    if alive:
        raise TimeoutError(f"{len(alive)} procs still alive {limit_s:.0f} s after stop")
    return time.perf_counter() - start


# ----------------------------------------------------------------------------- workloads


def sync_rtt(p: Params) -> Metrics:
    with spawned(1, SyncPinger) as mesh:
        _warm_up(mesh, p.warmup_calls)
        samples, total = timed_loop(lambda: mesh.ping.call_one(1).get(), p.rtt_calls, p.min_s)
    return latency_metrics(samples, total, "calls_per_s")


def pipelined(p: Params) -> Metrics:
    with spawned(1, SyncPinger) as mesh:
        _warm_up(mesh, p.warmup_calls)

        def burst() -> None:
            futs = [mesh.ping.call_one(i) for i in range(p.pipelined_calls)]
            for fut in futs:
                fut.get()

        rate = burst_rate(burst, p.pipelined_calls, p.min_s)
    return {"calls_per_s": rate}


def _bcast_gather(n: int, p: Params) -> Metrics:
    with spawned(n, SyncPinger) as mesh:
        replies = mesh.ping.call(1).get()
        assert len(list(replies.values())) == n, "gather returned the wrong number of replies"
        for _ in range(5):
            mesh.ping.call(1).get()
        samples, total = timed_loop(lambda: mesh.ping.call(1).get(), p.bcast_iters, p.min_s)
    return latency_metrics(samples, total, "casts_per_s")


def _actor_to_actor_kind(kind: str, caller: type, target: type, p: Params) -> Metrics:
    with ExitStack() as stack:
        a = stack.enter_context(spawned(1, caller, "caller"))
        b = stack.enter_context(spawned(1, target, "target"))
        a.call_seq.call_one(b, 20).get()  # warm up both sides and the A->B connection
        seq_s = a.call_seq.call_one(b, p.a2a_calls).get()
        pipe_s = a.call_pipelined.call_one(b, p.a2a_calls).get()
    return {
        f"{kind}_seq_calls_per_s": p.a2a_calls / seq_s,
        f"{kind}_pipelined_calls_per_s": p.a2a_calls / pipe_s,
    }


def actor_to_actor_same_proc(p: Params) -> Metrics:
    """A sync (then async) actor's calls to an actor of its own proc."""
    metrics: Metrics = {}
    for kind, caller, target in (("sync", SyncCaller, SyncPinger),
                                 ("async", AsyncCaller, AsyncPinger)):
        proc_mesh = api.this_host().spawn_procs(per_host={"procs": 1})
        try:
            a = proc_mesh.spawn("caller", caller)
            b = proc_mesh.spawn("target", target)
            a.call_seq.call_one(b, 20).get()  # warm up both actors
            seq_s = a.call_seq.call_one(b, p.a2a_calls).get()
            metrics[f"{kind}_seq_calls_per_s"] = p.a2a_calls / seq_s
        finally:
            _stop(proc_mesh)
    return metrics


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
    with spawned(1, SyncPinger) as mesh:
        mesh.echo.call_one(make(1024)).get()
        for _ in range(ECHO_WARMUP):
            mesh.echo.call_one(payload).get()
        for _ in range(p.echo_iterations(size_mib)):
            t0 = time.perf_counter()
            out = mesh.echo.call_one(payload).get()
            times.append(time.perf_counter() - t0)
            assert _payload_len(out) == size, "echo returned a payload of the wrong size"
            del out
    return gb_per_s(size, times)


def a2a_echo_numpy_256MiB(p: Params) -> Metrics:
    size = 256 * MIB
    with ExitStack() as stack:
        a = stack.enter_context(spawned(1, SyncCaller, "caller"))
        b = stack.enter_context(spawned(1, SyncPinger, "target"))
        times = a.echo_numpy.call_one(b, size, ECHO_WARMUP + p.echo_iterations(256)).get()
    return gb_per_s(size, times[ECHO_WARMUP:])


def _spawn(n: int, p: Params) -> Metrics:
    host = api.this_host()  # bootstrap the client outside the timed region
    start = time.perf_counter()
    proc_mesh = host.spawn_procs(per_host={"procs": n})
    try:
        mesh = proc_mesh.spawn("bench", SyncPinger)
        mesh.ping.call(1).get()
        spawn_s = time.perf_counter() - start
        procs = [psutil.Process(pid) for pid in mesh.pid.call().get().values()]
    except BaseException:
        _stop(proc_mesh)
        raise
    start = time.perf_counter()
    proc_mesh.stop().get(timeout=STOP_TIMEOUT_S)
    stop_s = time.perf_counter() - start
    return {"spawn_s": spawn_s, "stop_s": stop_s, "stop_exit_s": stop_s + wait_exit(procs)}


def idle_worker_mem(p: Params) -> Metrics:
    with spawned(1, SyncPinger) as mesh:
        pid = mesh.pid.call_one().get()
        time.sleep(1.0)  # let the worker settle after start-up
        info = psutil.Process(pid).memory_full_info()
    return {"rss_mib": info.rss / MIB, "uss_mib": info.uss / MIB}


def pipeline(p: Params) -> Metrics:
    """Issue 12 item 8: producer -> stage -> consumer, three async actors on three procs (each
    its own proc mesh), the producer casting flat out (``broadcast``, ``await sleep(0)``) for
    ``p.pipeline_s``. Delivered-while-running and the time to the first 100 are the point."""
    host = api.this_host()
    with ExitStack() as stack:
        meshes = [host.spawn_procs(per_host={"procs": 1}) for _ in range(3)]
        for pm in reversed(meshes):  # stopped producer first: nothing left undeliverable
            stack.callback(_stop, pm)
        consumer = meshes[2].spawn("consumer", PipeConsumer)
        stage = meshes[1].spawn("stage", PipeStage, consumer)
        producer = meshes[0].spawn("producer", PipeProducer, stage)
        consumer.report.call_one().get()
        stage.ready.call_one().get()
        sent, start, end = producer.run.call_one(p.pipeline_s).get(timeout=120)
        _, marks = consumer.report.call_one().get(timeout=120)
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
    """Bootstrap the client; return the framework version."""
    api.this_host()
    from importlib.metadata import PackageNotFoundError, version

    dist = "torchmonarch" if FRAMEWORK == "monarch" else FRAMEWORK
    try:
        found = version(dist)
    except PackageNotFoundError:
        found = "unknown"
    if FRAMEWORK == "regency":  # compiled or pure Python (ADR 0031)?
        from regency import _accel

        found += f", {len(_accel.compiled_modules())}/{len(_accel.HOT)} hot modules compiled"
    return found


def teardown() -> None:
    try:
        api.shutdown_context().get(timeout=30)
    except Exception as exc:
        print(f"[bench] warning: shutdown_context() failed: {exc!r}", flush=True)
