"""shutdown_context(): stops everything this process started; a new runtime starts after it."""

from __future__ import annotations

import os

import psutil
from _pids import still_alive

from _actors import Counter
from regency.actor import shutdown_context, this_host, this_proc

T = 20


def _zygotes() -> list[psutil.Process]:
    return [p for p in psutil.Process().children()
            if "regency._runtime._zygote" in " ".join(p.cmdline())]


def test_shutdown_context_then_a_new_mesh_works() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    counters = procs.spawn("before", Counter, 0)
    pids = list(counters.pid.call().get(timeout=T).values())
    local = this_proc().spawn("local_before", Counter, 0)
    assert local.incr.call_one().get(timeout=T) == 1
    old_zygotes = _zygotes()
    assert old_zygotes, "expected a fork server child"

    shutdown_context().get(timeout=T)
    # everything the first runtime started is gone
    alive = still_alive(pids, old_zygotes)
    assert not alive, alive
    # a second shutdown is a no-op
    shutdown_context().get(timeout=T)

    procs2 = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        counters2 = procs2.spawn("after", Counter, 10)
        assert list(counters2.incr.call().get(timeout=T).values()) == [11, 11]
        new_pids = list(counters2.pid.call().get(timeout=T).values())
        assert not set(new_pids) & set(pids)
        local2 = this_proc().spawn("local_after", Counter, 0)
        assert local2.pid.call_one().get(timeout=T) == os.getpid()
    finally:
        procs2.stop().get(timeout=T)


def test_shutdown_context_leaves_no_runtime_thread_behind() -> None:
    """After shutdown_context() no regency runtime may be left running in this process
    (the next regency call starts one, lazily)."""
    import threading

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    procs.spawn("x", Counter, 0).incr.call().get(timeout=T)
    shutdown_context().get(timeout=T)
    runtime_threads = [t.name for t in threading.enumerate()
                       if t.name == "regency-runtime" and t.is_alive()]
    assert runtime_threads == [], "shutdown_context() left (or restarted) a runtime"
