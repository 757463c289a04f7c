"""A proc's descendants end with it (``_runtime/_descendants.py``, ADR 0040): what an actor
started is SIGTERMed when its proc stops or dies, unless it left both the proc's process
group and its environment; that one ends with the host's fork server (the system test of
a controller's SIGKILL shows it). ``kill_proc_descendants=False`` keeps them all until
then."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Iterator

import psutil
import pytest
from _descendant_actors import KINDS, Starter

import regency.actor as ra
from regency import config
from regency.actor import default_bootstrap_cmd, this_host

T = 30
pytestmark = pytest.mark.timeout(120)

#: What a proc's end reaches: all but the process that left both its group and its mark.
REACHED = [kind for kind in KINDS if kind != "both"]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone(pids: dict[str, int]) -> dict[str, int]:
    """Wait until the processes of ``pids`` have ended (``T`` seconds at most); those left.
    (Polled: the event is in other processes.)"""
    deadline = time.monotonic() + T
    while True:
        left = {kind: pid for kind, pid in pids.items() if alive(pid)}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)


@pytest.fixture
def started() -> Iterator[list[int]]:
    """Pids a test started: killed at its end, whatever it asserted."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start(started: list[int], name: str) -> tuple[object, dict[str, int], int]:
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name=name)
    starter = procs.spawn("starter", Starter)
    pids = starter.start.call_one().get(timeout=T)
    started.extend(pids.values())
    assert all(alive(pid) for pid in pids.values()), pids
    return procs, pids, starter.pid.call_one().get(timeout=T)


def test_what_a_stopped_proc_started_ends_with_it(started: list[int]) -> None:
    procs, pids, _ = start(started, "stopped")
    procs.stop().get(timeout=T)
    assert gone({kind: pids[kind] for kind in REACHED}) == {}
    assert alive(pids["both"])  # no net holds it until the fork server ends


def test_what_a_killed_proc_started_ends_with_it(started: list[int],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ra, "unhandled_fault_hook", lambda failure: None)
    _, pids, proc_pid = start(started, "killed")
    os.kill(proc_pid, signal.SIGKILL)
    assert gone({kind: pids[kind] for kind in REACHED}) == {}


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_forked_child_in_a_session_of_its_own_ends_with_its_proc(
        how: str, started: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ra, "unhandled_fault_hook", lambda failure: None)
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name=f"forked_{how}")
    starter = procs.spawn("starter", Starter)
    pid = starter.fork_away.call_one().get(timeout=T)
    started.append(pid)
    if how == "stop":
        procs.stop().get(timeout=T)
    else:
        os.kill(starter.pid.call_one().get(timeout=T), signal.SIGKILL)
    assert gone({"forked": pid}) == {}


def test_a_proc_started_by_a_command_with_an_environment_of_its_own_is_marked(
        started: list[int]) -> None:
    bare = dataclasses.replace(default_bootstrap_cmd(), inherit_env=False,
                               env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="bare",
                                    bootstrap_command=bare)
    pids = procs.spawn("starter", Starter).start.call_one().get(timeout=T)
    started.extend(pids.values())
    procs.stop().get(timeout=T)
    assert gone({kind: pids[kind] for kind in REACHED}) == {}


def test_a_child_forked_by_a_proc_is_named_after_it_and_ends_on_sigterm() -> None:
    """It does not keep the proc's SIGTERM handler (which runs a proc's ``__cleanup__``)."""
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="forker")
    try:
        starter = procs.spawn("starter", Starter)
        mark = starter.mark.call_one().get(timeout=T)
        assert starter.forked_sigterm.call_one().get(timeout=T) == (True, mark)
    finally:
        procs.stop().get(timeout=T)


def test_a_descendant_that_ignores_sigterm_gets_sigkill(started: list[int]) -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="stubborn")
    stubborn = procs.spawn("starter", Starter)
    pid = stubborn.start_stubborn.call_one().get(timeout=T)
    started.append(pid)
    procs.stop().get(timeout=T)
    assert gone({"stubborn": pid}) == {}


@pytest.mark.parametrize("daemon", [False, True], ids=["child", "daemon"])
def test_a_multiprocessing_child_does_not_hold_its_procs_stop(started: list[int],
                                                              daemon: bool) -> None:
    """``multiprocessing`` joins its children when the proc exits: the stop waited for the
    proc to be killed (here 120 s; 13 s by default)."""
    with config.configured(stop_actor_timeout=120, cleanup_timeout=120):
        procs = this_host().spawn_procs(per_host={"gpus": 1}, name=f"mp_{daemon}")
        starter = procs.spawn("starter", Starter)
        pid = starter.start_multiprocessing.call_one(daemon).get(timeout=T)
        started.append(pid)
        procs.stop().get(timeout=T)  # (failing, the fixture's kill of the child frees it)
    assert gone({"multiprocessing": pid}) == {}


def test_descendants_outlive_their_proc_when_asked(started: list[int]) -> None:
    with config.configured(kill_proc_descendants=False):
        procs, pids, _ = start(started, "kept")
    procs.stop().get(timeout=T)
    # a proc ended after it, whose descendants end: by then these would have been ended
    later, later_pids, _ = start(started, "later")
    later.stop().get(timeout=T)
    assert gone({kind: later_pids[kind] for kind in REACHED}) == {}
    assert all(alive(pid) for pid in pids.values()), pids
