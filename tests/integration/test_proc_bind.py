"""``spawn_procs(proc_bind=...)``: each proc pins itself (and the threads it starts) to its
CPUs and NUMA memory before anything runs in it; what cannot be applied on its host fails
its actors, saying why."""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import sys
import threading

import pytest

import regency.actor as ra
from regency.actor import Actor, BootstrapCommand, endpoint, this_host
from regency.errors import SupervisionError

T = 30
CPUS = sorted(os.sched_getaffinity(0))
GET_MEMPOLICY = {"x86_64": 239, "aarch64": 236}.get(platform.machine())


class Where(Actor):
    @endpoint
    def cpus(self) -> tuple[list[int], list[int]]:
        """This thread's CPUs and a new thread's."""
        seen: list[list[int]] = []
        t = threading.Thread(target=lambda: seen.append(sorted(os.sched_getaffinity(0))))
        t.start()
        t.join()
        return sorted(os.sched_getaffinity(0)), seen[0]

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def mempolicy(self) -> tuple[int, int]:
        mode, mask = ctypes.c_int(), (ctypes.c_ulong * 16)()
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.syscall(GET_MEMPOLICY, ctypes.byref(mode), mask, ctypes.c_ulong(1024),
                            None, ctypes.c_ulong(0)) == 0
        return mode.value, mask[0]


def test_each_proc_runs_on_its_cpus() -> None:
    first, last = CPUS[0], CPUS[-1]
    procs = this_host().spawn_procs(per_host={"gpus": 2},
                                    proc_bind=[{"cpus": str(first)}, {"physcpubind": str(last)}])
    try:
        got = procs.spawn("where", Where).cpus.call().get(timeout=T)
        assert list(got.values()) == [([first], [first]), ([last], [last])]
    finally:
        procs.stop().get(timeout=T)


@pytest.mark.skipif(not os.path.exists("/sys/devices/system/node/node0") or not GET_MEMPOLICY,
                    reason="no NUMA node 0 in /sys, or an architecture without the call")
def test_a_proc_bound_to_a_numa_node() -> None:
    node0 = sorted(int(c) for c in _cpulist("/sys/devices/system/node/node0/cpulist"))
    procs = this_host().spawn_procs(per_host={"gpus": 1},
                                    proc_bind=[{"cpunodebind": "0", "membind": "0"}])
    try:
        where = procs.spawn("where", Where)
        assert where.cpus.call_one().get(timeout=T)[0] == [c for c in node0 if c in CPUS]
        assert where.mempolicy.call_one().get(timeout=T) == (2, 1)  # MPOL_BIND, node 0
    finally:
        procs.stop().get(timeout=T)


def test_what_cannot_be_applied_fails_the_procs_actors(unhandled_failures) -> None:
    with pytest.raises(ValueError, match=r"proc_bind length \(1\) must equal procs_per_host"):
        this_host().spawn_procs(per_host={"gpus": 2}, proc_bind=[{"cpus": "0"}])
    missing = max(CPUS) + 1
    procs = this_host().spawn_procs(per_host={"gpus": 1}, proc_bind=[{"cpus": str(missing)}])
    try:
        with pytest.raises(SupervisionError, match=rf"proc_bind \{{'cpus': '{missing}'\}} "
                                                   rf"cannot be applied on this host: CPU\(s\) "
                                                   rf"{missing} are not available here"):
            procs.spawn("where", Where).cpus.call_one().get(timeout=T)
    finally:
        procs.stop().get(timeout=T)


def test_a_respawned_rank_keeps_its_binding() -> None:
    first, last = CPUS[0], CPUS[-1]
    procs = this_host().spawn_procs(per_host={"gpus": 2},
                                    proc_bind=[{"cpus": str(first)}, {"cpus": str(last)}])
    seen: list[object] = []
    before, ra.unhandled_fault_hook = ra.unhandled_fault_hook, seen.append
    try:
        where = procs.spawn("where", Where)
        victim = where.slice(gpus=1).pid.call_one().get(timeout=T)
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(SupervisionError):
            where.slice(gpus=1).cpus.call_one().get(timeout=T)
        assert procs.respawn() == [1]
        assert where.slice(gpus=1).cpus.call_one().get(timeout=T) == ([last], [last])
    finally:
        ra.unhandled_fault_hook = before
        procs.stop().get(timeout=T)


def _cpulist(path: str) -> list[int]:
    from regency._runtime._procbind import parse_list

    with open(path) as f:
        return sorted(parse_list(f.read().strip(), "node0"))


class Marker(Actor):
    @endpoint
    def mark(self) -> None:
        print("marker", flush=True)


def test_the_binding_holds_before_a_bootstrap_command_runs() -> None:
    cpu = CPUS[-1]
    main = "regency._api._bootstrap_main"
    wrapper = BootstrapCommand("/bin/sh", None, [  # what it runs on, before Python starts
        "-c", f'grep Cpus_allowed_list: /proc/self/status; exec "$0" -m {main}',
        sys.executable], {})
    procs = this_host().spawn_procs(per_host={"gpus": 1}, proc_bind=[{"cpus": str(cpu)}],
                                    bootstrap_command=wrapper)
    try:
        procs.spawn("marker", Marker).mark.call_one().get(timeout=T)  # after its lines
        lines = procs.logs(tail=50).of(0)
    finally:
        procs.stop().get(timeout=T)
    assert lines[-1] == "marker"
    assert f"Cpus_allowed_list:\t{cpu}" in lines, lines
