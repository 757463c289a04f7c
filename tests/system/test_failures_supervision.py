"""Ownership and ``__supervise__`` (issue 3, items 1, 3 and 4).

Whoever spawns a mesh owns it; a failure of any member goes to the owner's
``__supervise__(failure) -> bool`` (sync or async, to match the actor). True handles it;
False, no ``__supervise__``, or an exception make the owner fail too, with the chain in its
report, up to the controller (here: the ``unhandled_failures`` log the test session installs
in place of the default hook). The actors live in ``_failure_actors.py``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from _failure_actors import AsyncManager, Manager, Parent, Victim
from _failure_scripts import describe, kill_tagged, run_failing

from regency.actor import ActorError, MeshFailure, SupervisionError, this_host

T = 20


def poll(what: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Call ``what`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing after {timeout}s from {what}")
        time.sleep(interval)


@pytest.fixture
def host_procs():
    """A one-proc mesh for the owner actor; stopped (with everything it owns) at the end."""
    procs = this_host().spawn_procs(per_host={"m": 1}, name="owner")
    yield procs
    procs.stop().get(timeout=T)


# -- True handles it --------------------------------------------------------------------------
def test_supervise_returning_true_handles_the_failure(host_procs, unhandled_failures) -> None:
    mgr = host_procs.spawn("mgr", Manager, "handle")
    mgr.worker_pids.call_one().get(timeout=T)
    mgr.fail_worker.call_one(1).get(timeout=T)
    seen = poll(lambda: mgr.seen_failures.call_one().get(timeout=T))
    assert len(seen) == 1
    f = seen[0]
    assert f["mesh_name"].startswith("workers1-")
    assert f["ranks"] == [1] and f["coords"] == [{"w": 1}]
    assert f["actor_class"] == "_failure_actors.Victim"
    assert f["endpoint"] == "boom"
    assert f["cause"] == "ValueError: worker failed on purpose"
    assert "raise ValueError(text)" in f["traceback"]
    assert f["host"] and f["pid"]
    # the owner lives on, nothing reached the controller
    assert mgr.generation_.call_one().get(timeout=T) == 1
    assert unhandled_failures() == []
    # the failed worker stays failed; its mesh refuses calls that include it
    with pytest.raises(ActorError) as info:
        mgr.ping_workers.call_one().get(timeout=T)
    assert isinstance(info.value.exception, SupervisionError)


def test_async_supervise_returning_true_handles_the_failure(host_procs,
                                                            unhandled_failures) -> None:
    mgr = host_procs.spawn("amgr", AsyncManager, True)
    mgr.start.call_one().get(timeout=T)
    mgr.fail_worker.call_one(0).get(timeout=T)
    seen = poll(lambda: mgr.seen_failures.call_one().get(timeout=T))
    assert seen[0]["ranks"] == [0] and seen[0]["coords"] == [{"w": 0}]
    assert seen[0]["cause"] == "ValueError: async worker failed on purpose"
    assert mgr.seen_failures.call_one().get(timeout=T)  # still alive
    assert unhandled_failures() == []


def test_supervise_spawning_a_replacement_recovers(host_procs, unhandled_failures) -> None:
    """The recovery pattern of docs/failures.md: replace the failed mesh, carry on."""
    mgr = host_procs.spawn("rmgr", Manager, "replace")
    assert mgr.ping_workers.call_one().get(timeout=T) == ["ok", "ok"]
    mgr.fail_worker.call_one(1).get(timeout=T)
    poll(lambda: mgr.generation_.call_one().get(timeout=T) == 2)
    assert mgr.replace_error_.call_one().get(timeout=T) is None
    assert mgr.ping_workers.call_one().get(timeout=T) == ["ok", "ok"]
    assert unhandled_failures() == []


# -- False, none, or raising: the owner fails, up to the controller ---------------------------
@pytest.mark.parametrize("mode", ["ignore", "none"])
def test_an_unhandled_failure_fails_the_owner_and_reaches_the_controller(
        host_procs, unhandled_failures, mode) -> None:
    mgr = host_procs.spawn(f"mgr_{mode}", Manager, mode)
    mgr.worker_pids.call_one().get(timeout=T)
    mgr.fail_worker.call_one(1).get(timeout=T)
    failures = poll(unhandled_failures)
    assert len(failures) == 1
    f = failures[0]
    assert isinstance(f, MeshFailure)
    assert f.mesh_name.startswith(f"mgr_{mode}-")
    assert f.ranks == [0] and f.coords == [{"m": 0}]
    assert f.actor_class == "_failure_actors.Manager"
    assert "did not handle the failure of mesh workers1-" in f.cause
    assert len(f.chain) == 1
    child = f.chain[0]
    assert "workers1-" in child and "rank 1 {'w': 1}" in child
    assert "_failure_actors.Victim" in child and "endpoint: boom" in child
    assert "ValueError: worker failed on purpose" in child
    report = f.report()
    assert "This error occurred while handling another failure" in report
    assert "ValueError: worker failed on purpose" in report
    # the owner is failed: calling it fails at once, naming why
    with pytest.raises(SupervisionError, match="did not handle"):
        mgr.generation_.call_one().get(timeout=T)


def test_an_async_owner_returning_false_fails_too(host_procs, unhandled_failures) -> None:
    mgr = host_procs.spawn("amgr_false", AsyncManager, False)
    mgr.start.call_one().get(timeout=T)
    mgr.fail_worker.call_one(1).get(timeout=T)
    f = poll(unhandled_failures)[0]
    assert f.mesh_name.startswith("amgr_false-")
    assert f.actor_class == "_failure_actors.AsyncManager"
    assert "ValueError: async worker failed on purpose" in f.chain[0]


def test_supervise_raising_fails_the_owner_with_the_chain(host_procs,
                                                          unhandled_failures) -> None:
    mgr = host_procs.spawn("mgr_raise", Manager, "raise")
    mgr.worker_pids.call_one().get(timeout=T)
    mgr.fail_worker.call_one(0).get(timeout=T)
    f = poll(unhandled_failures)[0]
    assert f.mesh_name.startswith("mgr_raise-")
    assert f.cause == "__supervise__ raised RuntimeError: __supervise__ raised on purpose"
    assert "raise RuntimeError" in f.traceback
    assert "ValueError: worker failed on purpose" in f.chain[0]
    assert "__supervise__ raised" in f.report() and "worker failed on purpose" in f.report()


def test_a_dead_worker_proc_is_supervised_with_its_exit_status(host_procs,
                                                               unhandled_failures) -> None:
    mgr = host_procs.spawn("mgr_kill", Manager, "handle")
    pids = mgr.worker_pids.call_one().get(timeout=T)
    os.kill(pids[1], signal.SIGKILL)
    seen = poll(lambda: [f for f in mgr.seen_failures.call_one().get(timeout=T)
                         if f["mesh_name"].startswith("workers1-")])
    f = seen[0]
    assert f["ranks"] == [1] and f["coords"] == [{"w": 1}]
    assert f["actor_class"] == "_failure_actors.Victim"
    assert f["pid"] == pids[1]
    assert "SIGKILL" in f["cause"]
    assert unhandled_failures() == []


# -- a child proc dies while its parent actor is mid-call -------------------------------------
def test_a_child_dying_mid_call_fails_the_parents_get_and_reaches_the_controller(
        host_procs, unhandled_failures, tmp_path) -> None:
    parent = host_procs.spawn("parent", Parent)
    kids = parent.start.call_one().get(timeout=T)
    running = tmp_path / "kid-running"
    pending = parent.wait_on_kid.call_one(1, 60, str(running))
    poll(running.exists)  # the kid runs the call: the parent is blocked in its .get()
    killed = time.monotonic()
    os.kill(kids[1], signal.SIGKILL)
    with pytest.raises(ActorError) as info:
        pending.get(timeout=T)
    took = time.monotonic() - killed
    assert took < 1.0, f"the parent's blocking get took {took:.2f}s to fail"
    inner = info.value.exception
    assert isinstance(inner, SupervisionError), info.value
    assert "sleep_marked" in str(inner) and "rank 1" in str(inner) and "SIGKILL" in str(inner)
    # the parent has no __supervise__: it fails, and the root hears of it
    f = poll(unhandled_failures)[0]
    assert f.mesh_name.startswith("parent-")
    assert f.actor_class == "_failure_actors.Parent"
    assert any("SIGKILL" in c for c in f.chain), f.report()


def test_the_controllers_report_of_a_nested_crash_names_the_child_actor(
        host_procs, unhandled_failures, tmp_path) -> None:
    parent = host_procs.spawn("parent2", Parent)
    kids = parent.start.call_one().get(timeout=T)
    running = tmp_path / "kid-running"
    pending = parent.wait_on_kid.call_one(1, 60, str(running))
    poll(running.exists)
    os.kill(kids[1], signal.SIGKILL)
    with pytest.raises(ActorError):
        pending.get(timeout=T)
    report = poll(unhandled_failures)[0].report()
    for text in ("kids-", "rank 1 {'kids': 1}", "_failure_actors.Victim", "endpoint: sleep_marked",
                 "SIGKILL", f"pid {kids[1]}"):
        assert text in report, f"{text!r} missing:\n{report}"


def test_a_nested_failure_fails_fast_at_the_controller(tmp_path) -> None:
    """The same with the default hook, in a whole program: one report with the chain."""
    run = run_failing(tmp_path, """
        class Manager(Actor):
            @endpoint
            def start(self):
                self.procs = this_host().spawn_procs(per_host={"w": 2}, name="wprocs")
                self.workers = self.procs.spawn("workers", Victim)
                self.workers.ping.call("warm").get(timeout=20)

            @endpoint
            def fail_worker(self):
                self.workers.slice(w=1).boom.broadcast("nested failure")

            def __supervise__(self, failure):
                print("SUPERVISE", failure.cause, flush=True)
                return False

        procs = this_host().spawn_procs(per_host={"m": 1}, name="owner")
        mgr = procs.spawn("manager", Manager)
        mgr.start.call_one().get(timeout=20)
        mark("T0")
        mgr.fail_worker.call_one().get(timeout=20)
        time.sleep(60)
        """)
    try:
        assert run.returncode == 1, describe(run)
        assert run.after_t0 < 2.5, describe(run)
        assert "SUPERVISE ValueError: nested failure" in run.stdout, describe(run)
        err = run.stderr
        assert err.count("=== regency: unhandled failure") == 1, describe(run)
        for text in ("mesh 'manager-", "__main__.Manager", "did not handle",
                     "This error occurred while handling another failure", "mesh 'workers-",
                     "rank 1 {'w': 1}", "__main__.Victim", "endpoint: boom",
                     "ValueError: nested failure"):
            assert text in err, f"{text!r} missing\n{describe(run)}"
    finally:
        kill_tagged(run.tag)


def test_a_report_read_in_a_proc_names_the_controllers_script(tmp_path) -> None:
    """Code carried by value from the script is ``<dynamic-code>`` in a proc, whose own
    ``__main__`` is the fork server: the report named the fork server's file."""
    run = run_failing(tmp_path, """
        class Manager(Actor):
            @endpoint
            def start(self):
                self.procs = this_host().spawn_procs(per_host={"w": 1}, name="wprocs")
                self.workers = self.procs.spawn("workers", Victim)
                self.workers.ping.call("warm").get(timeout=20)
                self.workers.boom.broadcast("nested failure")

            def __supervise__(self, failure):
                with open("report.tmp", "w") as f:
                    f.write(failure.report())
                os.rename("report.tmp", "report.txt")
                return True

        procs = this_host().spawn_procs(per_host={"m": 1}, name="owner")
        procs.spawn("manager", Manager).start.call_one().get(timeout=20)
        waited = time.monotonic()
        while not os.path.exists("report.txt") and time.monotonic() - waited < 30:
            time.sleep(0.01)
        print(open("report.txt").read())
        """, timeout=60)
    try:
        assert run.returncode == 0 and "ValueError: nested failure" in run.stdout, describe(run)
        assert f'File "{tmp_path / "controller.py"}", line' in run.stdout, describe(run)
        assert "_zygote.py" not in run.stdout and "<dynamic-code>" not in run.stdout
    finally:
        kill_tagged(run.tag)


def test_init_failure_goes_to_the_owner(host_procs, unhandled_failures) -> None:
    """An exception in ``__init__`` of an owned actor is a failure for its owner."""
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="initfail")
    try:
        doomed = procs.spawn("doomed", Victim, True)
        with pytest.raises(SupervisionError, match="init failed on purpose"):
            doomed.ping.call().get(timeout=T)
        failures = poll(lambda: unhandled_failures() if len(unhandled_failures()) == 2 else [])
        assert sorted(f.ranks[0] for f in failures) == [0, 1]
        for f in failures:
            assert f.endpoint == "__init__"
            assert f.cause == "ValueError: init failed on purpose"
            assert "raise ValueError" in f.traceback
    finally:
        procs.stop().get(timeout=T)
