"""Fail fast at the controller (issue 3, items 2-4): every way a rank can fail, unhandled,
ends the program promptly with a non-zero status and one readable report naming the mesh,
the rank and its coordinates, the actor class, the endpoint in flight, host and pid, the
cause and the last lines the proc printed; whatever the main thread is doing at the time.

Each test runs a whole controller program in a subprocess (exit codes and stderr are the
point) and bounds it with a timeout.
"""

from __future__ import annotations

import re
import socket
import time
import uuid
from pathlib import Path

import pytest
from _failure_scripts import (
    banner_count,
    describe,
    kill_tagged,
    report_text,
    run_failing,
    top_level_tracebacks,
)
from _scripts import wait_no_tagged

PROMPT_S = 2.5  # from the failure to the controller's exit ("promptly")
HOST = socket.gethostname()


@pytest.fixture
def reap():
    tags: list[str] = []
    yield tags
    for tag in tags:
        kill_tagged(tag)


def _pid_of(stdout: str, label: str = "PID") -> int:
    m = re.search(rf"^{label} (\d+)$", stdout, re.M)
    assert m, f"no {label} line in:\n{stdout}"
    return int(m.group(1))


def assert_fail_fast(run, *expected: str) -> str:
    """Exit status 1, promptly, one report containing ``expected``, nothing left running."""
    assert run.returncode == 1, describe(run)
    assert run.after_t0 < PROMPT_S, f"exit {run.after_t0:.2f}s after the failure\n{describe(run)}"
    assert banner_count(run.stderr) == 1, describe(run)
    report = report_text(run.stderr)
    for text in expected:
        assert text in report, f"{text!r} missing from the report\n{describe(run)}"
    assert not top_level_tracebacks(run.stderr), describe(run)
    assert not wait_no_tagged(run.tag), describe(run)
    return report


# -- every kind of failure, main thread in time.sleep ---------------------------------------
# (script body, strings the report must contain; {pid} is rank 1's pid)
KINDS = {
    "exception_in_init": ("""
        procs = this_host().spawn_procs(per_host={"gpus": 2}, name="victims")
        procs.initialized.get(timeout=20)
        mark("T0")
        doomed = procs.spawn("doomed", Victim, True)
        time.sleep(60)
        """, ["mesh 'doomed-", "__main__.Victim", "endpoint: __init__",
              "ValueError: init failed on purpose", "Traceback", f"host:     {HOST} pid "]),
    "exception_in_broadcast": ("""
        procs, victims = spawn_victims()
        print("PID", victims.slice(gpus=1).pid.call_one().get(timeout=20), flush=True)
        mark("T0")
        victims.slice(gpus=1).boom.broadcast("broadcast failed on purpose")
        time.sleep(60)
        """, ["mesh 'victim-", "rank 1 {'gpus': 1}", "__main__.Victim", "endpoint: boom",
              "ValueError: broadcast failed on purpose", "Traceback",
              f"host:     {HOST} pid {{pid}}"]),
    "base_exception_in_endpoint": ("""
        procs, victims = spawn_victims()
        print("PID", victims.slice(gpus=1).pid.call_one().get(timeout=20), flush=True)
        mark("T0")
        pending = victims.slice(gpus=1).abort.call_one()
        time.sleep(60)
        """, ["rank 1 {'gpus': 1}", "__main__.Victim", "endpoint: abort",
              "Abort: a BaseException escaped the endpoint", "pid {pid}"]),
    "system_exit_in_endpoint": ("""
        procs, victims = spawn_victims()
        print("PID", victims.slice(gpus=1).pid.call_one().get(timeout=20), flush=True)
        mark("T0")
        pending = victims.slice(gpus=1).system_exit.call_one(4)
        time.sleep(60)
        """, ["rank 1 {'gpus': 1}", "__main__.Victim", "endpoint: system_exit",
              "SystemExit: 4", "pid {pid}"]),
    "os_exit": ("""
        procs, victims = spawn_victims()
        print("PID", victims.slice(gpus=1).pid.call_one().get(timeout=20), flush=True)
        mark("T0")
        pending = victims.slice(gpus=1).os_exit.call_one(3)
        time.sleep(60)
        """, ["rank 1 {'gpus': 1}", "__main__.Victim", "endpoint: os_exit",
              "exited with code 3", f"host:     {HOST} pid {{pid}}"]),
    "sigkill": ("""
        procs, victims = spawn_victims()
        pid = victims.slice(gpus=1).pid.call_one().get(timeout=20)
        print("PID", pid, flush=True)
        pending = victims.slice(gpus=1).sleep.call_one(60)
        mark("T0")
        os.kill(pid, signal.SIGKILL)
        time.sleep(60)
        """, ["rank 1 {'gpus': 1}", "__main__.Victim", "endpoint: sleep", "SIGKILL",
              f"host:     {HOST} pid {{pid}}"]),
    "sigsegv": ("""
        procs, victims = spawn_victims()
        print("PID", victims.slice(gpus=1).pid.call_one().get(timeout=20), flush=True)
        mark("T0")
        pending = victims.slice(gpus=1).segfault.call_one()
        time.sleep(60)
        """, ["rank 1 {'gpus': 1}", "__main__.Victim", "endpoint: segfault", "SIGSEGV",
              "in segfault",  # the Python stack faulthandler printed, in the proc's last lines
              "pid {pid}"]),
    "memory_error_under_rlimit": ("""
        def limit_memory():
            import resource
            with open("/proc/self/status") as f:
                vm_kib = int(f.read().split("VmSize:")[1].split()[0])
            limit = (vm_kib << 10) + (512 << 20)
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))

        procs, victims = spawn_victims(bootstrap=limit_memory)
        print("PID", victims.slice(gpus=1).pid.call_one().get(timeout=20), flush=True)
        mark("T0")
        victims.slice(gpus=1).alloc.broadcast(4096)
        time.sleep(60)
        """, ["rank 1 {'gpus': 1}", "__main__.Victim", "endpoint: alloc", "MemoryError",
              "pid {pid}"]),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_unhandled_failure_fails_fast_with_a_full_report(tmp_path, reap, kind) -> None:
    body, expected = KINDS[kind]
    run = run_failing(tmp_path, body)
    reap.append(run.tag)
    pid = _pid_of(run.stdout) if "{pid}" in "".join(expected) else None
    assert_fail_fast(run, *(e.replace("{pid}", str(pid)) for e in expected))


def test_the_report_carries_the_last_20_lines_the_proc_printed(tmp_path, reap) -> None:
    run = run_failing(tmp_path, """
        procs, victims = spawn_victims()
        victims.slice(gpus=1).chatter.call_one(30).get(timeout=20)
        mark("T0")
        pending = victims.slice(gpus=1).os_exit.call_one(3)
        time.sleep(60)
        """)
    reap.append(run.tag)
    report = assert_fail_fast(run, "exited with code 3", "last 20 lines printed by the proc")
    for i in range(10, 30):
        assert f"| chatter line {i}\n" in report + "\n", describe(run)
    assert "| chatter line 9\n" not in report, describe(run)


def test_the_report_of_an_exception_failure_carries_the_last_lines_too(tmp_path, reap) -> None:
    run = run_failing(tmp_path, """
        procs, victims = spawn_victims()
        victims.slice(gpus=1).chatter.call_one(5, "context before the failure").get(timeout=20)
        mark("T0")
        victims.slice(gpus=1).boom.broadcast("broadcast failed on purpose")
        time.sleep(60)
        """)
    reap.append(run.tag)
    assert_fail_fast(run, "ValueError: broadcast failed on purpose",
                     "| context before the failure 4")


def test_the_report_of_a_crash_during_a_broadcast_names_the_endpoint(tmp_path, reap) -> None:
    run = run_failing(tmp_path, """
        procs, victims = spawn_victims()
        mark("T0")
        victims.slice(gpus=1).os_exit.broadcast(3)
        time.sleep(60)
        """)
    reap.append(run.tag)
    assert_fail_fast(run, "exited with code 3", "endpoint: os_exit")


def test_other_failures_while_exiting_are_summed_up_in_a_few_lines(tmp_path, reap) -> None:
    """A broadcast that fails on all 8 ranks: one report; the others that reach the
    controller before it exits get a line each, three at most, then a count."""
    run = run_failing(tmp_path, """
        procs, victims = spawn_victims(8)
        mark("T0")
        victims.boom.broadcast("all fail")
        time.sleep(60)
        """)
    reap.append(run.tag)
    assert run.returncode == 1 and banner_count(run.stderr) == 1, describe(run)
    also = [ln for ln in run.stderr.splitlines() if "meanwhile, also unhandled" in ln]
    assert len(also) <= 3, describe(run)
    assert all("ValueError: all fail" in ln and "mesh '" in ln for ln in also), describe(run)
    more = [ln for ln in run.stderr.splitlines() if "more unhandled failure(s)" in ln]
    assert len(more) <= 1 and (not more or len(also) == 3), describe(run)


def test_a_reports_summary_names_the_mesh_ranks_and_cause() -> None:
    from regency._api._failfast import summary

    report = ("=== regency: unhandled failure, stopping the program ===\n"
              "The actor <__main__.W w{'gpus': 1}> and all its descendants have failed:\n"
              "  RuntimeError: boom\nmesh 'w-1' failed: rank 1 {'gpus': 1}\n"
              "  actor:    __main__.W\n  cause:    RuntimeError: boom\n")
    assert summary(report) == "mesh 'w-1' failed: rank 1 {'gpus': 1}: RuntimeError: boom"
    assert summary("something else\n") == "something else"


CGROUP_BODY = """
    CGROUP_PROCS = {procs!r}

    def into_the_small_cgroup():
        with open(CGROUP_PROCS, "w") as f:
            f.write(str(os.getpid()))

    procs, victims = spawn_victims(bootstrap=into_the_small_cgroup)
    print("PID", victims.slice(gpus=1).pid.call_one().get(timeout=20), flush=True)
    mark("T0")
    pending = victims.slice(gpus=1).alloc.call_one(1024)
    time.sleep(60)
    """


@pytest.fixture
def small_cgroup():
    """A fresh memory cgroup limited to 64 MiB under ours (v2 or v1), or skip the test."""
    path = _memory_cgroup()
    yield path
    _remove_cgroup(path)


def test_cgroup_out_of_memory_kill_fails_fast(tmp_path, reap, small_cgroup) -> None:
    """A proc killed by the kernel's OOM killer (cgroup memory limit) fails fast."""
    run = run_failing(tmp_path, CGROUP_BODY.format(procs=str(small_cgroup / "cgroup.procs")))
    reap.append(run.tag)
    pid = _pid_of(run.stdout)
    assert_fail_fast(run, "rank 1 {'gpus': 1}", "endpoint: alloc", "SIGKILL", f"pid {pid}")


def test_cgroup_out_of_memory_kill_is_reported_as_out_of_memory(tmp_path, reap,
                                                                 small_cgroup) -> None:
    run = run_failing(tmp_path, CGROUP_BODY.format(procs=str(small_cgroup / "cgroup.procs")))
    reap.append(run.tag)
    assert_fail_fast(run, "SIGKILL", "out of memory")


def _memory_cgroup() -> Path:
    name = f"regency-test-{uuid.uuid4().hex[:8]}"
    own_v1 = own_v2 = None
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                own_v2 = path
            elif "memory" in controllers.split(","):
                own_v1 = path
    except (OSError, ValueError):
        pytest.skip("cannot read /proc/self/cgroup")
    candidates = []
    if own_v2 is not None:
        base = Path("/sys/fs/cgroup") / own_v2.lstrip("/")
        if "memory" in _read(base / "cgroup.subtree_control").split():
            candidates.append((base / name, "memory.max"))
    if own_v1 is not None:
        candidates.append((Path("/sys/fs/cgroup/memory") / own_v1.lstrip("/") / name,
                           "memory.limit_in_bytes"))
    for path, knob in candidates:
        try:
            path.mkdir()
        except OSError:
            continue
        try:
            (path / knob).write_text(str(64 << 20))
        except OSError:
            _remove_cgroup(path)
            continue
        for extra, value in (("memory.swappiness", "0"), ("memory.swap.max", "0")):
            if (path / extra).exists():
                try:
                    (path / extra).write_text(value)
                except OSError:
                    pass
        return path
    pytest.skip("no writable memory cgroup (needs root and a memory controller)")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _remove_cgroup(path: Path) -> None:
    deadline = time.monotonic() + 5
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)


# -- whatever the main thread is doing ------------------------------------------------------
def test_fail_fast_interrupts_a_blocking_get(tmp_path, reap) -> None:
    """The main thread waits forever on a call that will never be answered (dropped); a
    failure of another rank still ends the program at once."""
    run = run_failing(tmp_path, """
        from regency.testing import drop_calls
        procs, victims = spawn_victims()
        drop_calls(victims.ping, ranks=[0])
        never = victims.slice(gpus=0).ping.call_one("never answered")
        mark("T0")
        victims.slice(gpus=1).boom.broadcast("failed while main was in get()")
        never.get()
        print("NOT REACHED", flush=True)
        """)
    reap.append(run.tag)
    assert "NOT REACHED" not in run.stdout
    assert_fail_fast(run, "ValueError: failed while main was in get()")


def test_fail_fast_does_not_wait_for_busy_healthy_actors(tmp_path, reap) -> None:
    run = run_failing(tmp_path, """
        procs, victims = spawn_victims()
        busy = victims.slice(gpus=0).sleep.call_one(60)
        mark("T0")
        victims.slice(gpus=1).boom.broadcast("failed while rank 0 was busy")
        busy.get()
        """)
    reap.append(run.tag)
    assert_fail_fast(run, "ValueError: failed while rank 0 was busy")


def test_fail_fast_interrupts_an_asyncio_main(tmp_path, reap) -> None:
    """``asyncio.run(main())`` sleeping in ``await asyncio.sleep``: still ends at once."""
    run = run_failing(tmp_path, """
        import asyncio

        async def main():
            procs, victims = spawn_victims()
            mark("T0")
            victims.slice(gpus=1).boom.broadcast("failed while main awaited")
            await asyncio.sleep(60)
            print("NOT REACHED", flush=True)

        asyncio.run(main())
        """)
    reap.append(run.tag)
    assert_fail_fast(run, "ValueError: failed while main awaited")


def test_fail_fast_sends_its_interrupt_again_until_the_main_thread_has_it(tmp_path,
                                                                         reap) -> None:
    """A SIGINT that lands just before the main thread blocks (an event loop entering
    ``epoll_wait``) is handled only when that call returns. Modelled here by a handler
    that swallows the first one: the program still ends at once, not at the deadline."""
    run = run_failing(tmp_path, """
        import signal

        procs, victims = spawn_victims()
        handler, missed = signal.getsignal(signal.SIGINT), []

        def miss_the_first(sig, frame):
            if not missed:
                missed.append(sig)
                return None
            return handler(sig, frame)

        signal.signal(signal.SIGINT, miss_the_first)
        mark("T0")
        victims.slice(gpus=1).boom.broadcast("failed while the first interrupt was lost")
        time.sleep(60)
        """)
    reap.append(run.tag)
    assert_fail_fast(run, "ValueError: failed while the first interrupt was lost")


def test_a_failure_after_the_last_line_does_not_exit_0(tmp_path, reap) -> None:
    """The script ends while a rank is about to fail: the exit status says it failed."""
    run = run_failing(tmp_path, """
        procs, victims = spawn_victims()
        victims.slice(gpus=1).boom.broadcast("failed after the last line", 0.3)
        mark("T0")
        """)
    reap.append(run.tag)
    assert_fail_fast(run, "ValueError: failed after the last line")


def test_a_crash_after_the_last_line_does_not_exit_0(tmp_path, reap) -> None:
    run = run_failing(tmp_path, """
        procs, victims = spawn_victims()
        victims.slice(gpus=1).os_exit.broadcast(3, 0.3)
        mark("T0")
        """)
    reap.append(run.tag)
    assert_fail_fast(run, "exited with code 3")


def test_an_uncaught_supervision_error_exits_non_zero(tmp_path, reap) -> None:
    run = run_failing(tmp_path, """
        procs, victims = spawn_victims()
        mark("T0")
        victims.slice(gpus=1).os_exit.call_one(3).get(timeout=20)
        """)
    reap.append(run.tag)
    assert run.returncode == 1, describe(run)
    assert run.after_t0 < PROMPT_S, describe(run)
    assert banner_count(run.stderr) == 1 and "exited with code 3" in run.stderr, describe(run)
    assert not wait_no_tagged(run.tag), describe(run)


def test_an_uncaught_supervision_error_keeps_its_traceback(tmp_path, reap) -> None:
    run = run_failing(tmp_path, """
        def slow_hook(kind, exc, tb):   # a traceback formatter that takes a moment
            time.sleep(0.5)
            sys.__excepthook__(kind, exc, tb)
        sys.excepthook = slow_hook

        procs, victims = spawn_victims()
        mark("T0")
        victims.slice(gpus=1).os_exit.call_one(3).get(timeout=20)
        """)
    reap.append(run.tag)
    assert run.returncode == 1, describe(run)
    assert top_level_tracebacks(run.stderr), describe(run)
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("regency.errors.SupervisionError: Endpoint call victim.os_exit()"), (
        describe(run))
    assert "rank 1" in last and "exited with code 3" in last, describe(run)


def test_a_script_that_catches_the_failure_of_its_call_is_still_stopped(tmp_path, reap) -> None:
    """The blocked get() raises the failure (fail fast lets it, so an uncaught one keeps its
    traceback); a script that catches it and goes on is interrupted right after."""
    run = run_failing(tmp_path, """
        procs, victims = spawn_victims()
        mark("T0")
        try:
            victims.slice(gpus=1).os_exit.call_one(3).get(timeout=20)
        except SupervisionError:
            print("CAUGHT", flush=True)
        time.sleep(30)
        print("NOT REACHED", flush=True)
        """)
    reap.append(run.tag)
    assert run.returncode == 1, describe(run)
    assert "CAUGHT" in run.stdout and "NOT REACHED" not in run.stdout, describe(run)
    # interrupted right after, not at the hard deadline (fail_fast_exit_deadline, 5 s)
    assert run.end - run.marks["T0"] < 4, describe(run)
    assert banner_count(run.stderr) == 1, describe(run)


def test_a_failure_during_spawn_is_not_lost(tmp_path, reap) -> None:
    run = run_failing(tmp_path, """
        import regency._api._supervisor as supervisor_module

        original = supervisor_module.Supervisor.mesh_spawned

        def descheduled(self, *args, **kwargs):
            time.sleep(0.5)
            return original(self, *args, **kwargs)

        procs = this_host().spawn_procs(per_host={"gpus": 2}, name="victims")
        procs.initialized.get(timeout=20)
        supervisor_module.Supervisor.mesh_spawned = descheduled
        mark("T0")
        doomed = procs.spawn("doomed", Victim, True)
        time.sleep(4)
        print("NOT REPORTED", flush=True)
        """)
    reap.append(run.tag)
    assert "NOT REPORTED" not in run.stdout, describe(run)
    assert_fail_fast(run, "endpoint: __init__", "ValueError: init failed on purpose")


# -- the hook is replaceable ------------------------------------------------------------------
def test_a_replaced_hook_that_returns_lets_the_program_go_on(tmp_path, reap) -> None:
    run = run_failing(tmp_path, """
        seen = []
        ra.unhandled_fault_hook = seen.append   # looked up when a failure arrives
        procs, victims = spawn_victims()
        victims.slice(gpus=1).boom.broadcast("handled by the hook")
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.02)
        f = seen[0]
        assert isinstance(f, MeshFailure), f
        print("FAILURE", f.mesh_name.split("-")[0], f.ranks, f.coords, f.actor_class,
              f.endpoint, f.cause, flush=True)
        try:
            victims.slice(gpus=1).ping.call_one().get(timeout=10)
        except SupervisionError as e:
            print("DEAD RANK REFUSED", flush=True)
        print("SURVIVOR", victims.slice(gpus=0).ping.call_one("alive").get(timeout=10),
              flush=True)
        procs.stop().get(timeout=20)
        print("END", flush=True)
        """)
    reap.append(run.tag)
    assert run.returncode == 0, describe(run)
    assert ("FAILURE victim [1] [{'gpus': 1}] __main__.Victim boom ValueError: handled by the "
            "hook") in run.stdout, describe(run)
    assert "DEAD RANK REFUSED" in run.stdout and "SURVIVOR alive" in run.stdout
    assert "END" in run.stdout
    assert banner_count(run.stderr) == 0, describe(run)
    assert not wait_no_tagged(run.tag), describe(run)


def test_a_replaced_hook_that_raises_fails_fast(tmp_path, reap) -> None:
    run = run_failing(tmp_path, """
        def strict(failure):
            print("HOOK", failure.cause, flush=True)
            raise RuntimeError("my hook says stop")
        ra.unhandled_fault_hook = strict
        procs, victims = spawn_victims()
        mark("T0")
        victims.slice(gpus=1).boom.broadcast("the hook raises")
        time.sleep(60)
        """)
    reap.append(run.tag)
    assert "HOOK ValueError: the hook raises" in run.stdout, describe(run)
    assert_fail_fast(run, "ValueError: the hook raises")


def test_the_default_hook_is_exported_and_fails_fast(tmp_path, reap) -> None:
    """``regency.actor.unhandled_fault_hook`` is the default: calling it ends the program."""
    run = run_failing(tmp_path, """
        import regency.actor
        f = MeshFailure(mesh_name="m-1", ranks=[0], cause="by hand")
        mark("T0")
        regency.actor.unhandled_fault_hook(f)
        print("NOT REACHED", flush=True)
        """)
    reap.append(run.tag)
    assert run.returncode != 0 and "NOT REACHED" not in run.stdout, describe(run)
