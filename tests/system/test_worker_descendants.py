"""A worker's procs' descendants end with them too (``_runtime/_descendants.py``, ADR 0040):
the setting travels with the spawn, and the worker's fork server, which ends with the
worker (``shutdown()``) and is renewed when the controller lets go of it (``stop()``),
takes what no other net held."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from _scripts import loopback_worker

pytestmark = pytest.mark.timeout(180)

SCRIPT = """
import json, os, subprocess, sys, time
import psutil
from regency.actor import Actor, attach_to_workers, endpoint

class Starter(Actor):
    @endpoint
    def start(self):
        bare = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        return {"child": subprocess.Popen(["sleep", "600"]).pid,
                "own session": subprocess.Popen(["sleep", "600"], start_new_session=True).pid,
                "both": subprocess.Popen(["sleep", "600"], start_new_session=True,
                                         env=bare).pid}

def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

hosts = attach_to_workers([sys.argv[1]])
procs = hosts.spawn_procs(per_host={"gpus": 1})
pids = procs.spawn("starter", Starter).start.call_one().get(timeout=60)
print("PIDS", json.dumps(pids), flush=True)
procs.stop().get(timeout=60)
deadline = time.monotonic() + 30  # polled: they end in other processes
while alive(pids["child"]) or alive(pids["own session"]):
    assert time.monotonic() < deadline, "a stopped proc's descendants outlived it"
    time.sleep(0.02)
print("ENDED WITH THE PROC", alive(pids["both"]), flush=True)
if sys.argv[2] == "release":  # the worker lives on for the next controller
    hosts.stop()
    deadline = time.monotonic() + 30
    while alive(pids["both"]):  # its fork server ends: what it adopted goes with it
        assert time.monotonic() < deadline, "the release left a process behind"
        time.sleep(0.02)
    print("ENDED WITH THE RELEASE", flush=True)
else:
    hosts.shutdown()
"""


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("end", ["shutdown", "release"])
def test_a_workers_procs_descendants_end_with_them_and_with_the_worker(
        tmp_path: Path, end: str) -> None:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "REGENCY_SECRET": "descendants", "PYTHONUNBUFFERED": "1"}
    pids: dict[str, int] = {}
    try:
        with loopback_worker(env) as (worker, address):
            done = subprocess.run([sys.executable, str(script), address, end], env=env,
                                  capture_output=True, text=True, timeout=120)
            out = done.stdout + done.stderr
            found = [ln for ln in done.stdout.splitlines() if ln.startswith("PIDS ")]
            if found:
                pids = json.loads(found[0][5:])
            assert done.returncode == 0, out
            # the one that left both group and environment lived on until the release
            assert "ENDED WITH THE PROC True" in done.stdout, out
            if end == "shutdown":
                assert worker.wait(timeout=30) == 0
            else:
                assert "ENDED WITH THE RELEASE" in done.stdout, out
                assert worker.poll() is None  # it waits for the next controller
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in pids.values()):  # polled, as above
            assert time.monotonic() < deadline, {k: p for k, p in pids.items() if alive(p)}
            time.sleep(0.02)
    finally:
        for pid in pids.values():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


RELEASED_AT_ONCE = """
import sys
from regency.actor import attach_to_workers

hosts = attach_to_workers([sys.argv[1]])
hosts.spawn_procs(per_host={"gpus": 4})  # not waited for: some may still be forking
hosts.stop()
print("RELEASED", flush=True)
"""


def test_procs_still_being_spawned_when_the_worker_is_released_end_too(
        tmp_path: Path) -> None:
    """A proc killed while the fork server was forking it is killed when it appears (it
    lived on, with no controller, until the worker exited). A race: this run may not hit
    it, but it must never leave a proc."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(RELEASED_AT_ONCE))
    env = {**os.environ, "REGENCY_SECRET": "descendants", "PYTHONUNBUFFERED": "1"}
    with loopback_worker(env) as (worker, address):
        done = subprocess.run([sys.executable, str(script), address], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "RELEASED" in done.stdout, done.stdout + done.stderr
        deadline = time.monotonic() + 30
        while left := procs_of(worker.pid):  # polled: the procs end in other processes
            assert time.monotonic() < deadline, f"procs outlived the release: {left}"
            time.sleep(0.05)


def procs_of(worker: int) -> list[int]:
    """The live procs of a worker: its fork server's children."""
    procs = []
    for p in psutil.Process(worker).children(recursive=True):
        try:
            if (p.ppid() != worker and p.status() != psutil.STATUS_ZOMBIE
                    and "regency._runtime._zygote" in " ".join(p.cmdline()[:3])):
                procs.append(p.pid)
        except psutil.NoSuchProcess:
            continue
    return procs

