"""A worker host killed outright (SIGKILL of its whole process group) is a failure the
controller reports and fails fast on, as for a frozen one. Before, its procs' connections
broke first, which only marked them unreachable: no report, and the program exited 0."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from _scripts import loopback_worker

pytestmark = pytest.mark.timeout(180)

SCRIPT = """
import os, sys, time
from regency.actor import Actor, attach_to_workers, endpoint

class Echo(Actor):
    @endpoint
    def pid(self):
        return os.getpid()

hosts = attach_to_workers([sys.argv[1]])
procs = hosts.spawn_procs(per_host={"gpus": 2})
pids = procs.spawn("echo", Echo).pid.call().get(timeout=60)
print("READY", *pids.values(), flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:  # the failure interrupts this wait
    time.sleep(0.05)
print("NOT REPORTED", flush=True)
"""


@contextlib.contextmanager
def on_a_worker(tmp_path: Path, source: str, merged: bool
                ) -> Iterator[tuple[subprocess.Popen[str], subprocess.Popen[str]]]:
    """A loopback worker and a controller script attached to it: ``(worker, controller)``
    (its stderr merged into its stdout when ``merged``); the controller is killed on the
    way out if it still runs."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    env = {**os.environ, "REGENCY_SECRET": "killed-worker", "PYTHONUNBUFFERED": "1"}
    with loopback_worker(env) as (worker, address):
        controller = subprocess.Popen(
            [sys.executable, str(script), address], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True,
            start_new_session=True)
        try:
            yield worker, controller
        finally:
            if controller.poll() is None:
                os.killpg(controller.pid, signal.SIGKILL)


def test_a_killed_worker_is_reported_and_the_program_fails(tmp_path: Path) -> None:
    with on_a_worker(tmp_path, SCRIPT, merged=False) as (worker, controller):
        assert controller.stdout is not None
        ready = controller.stdout.readline()  # bounded by the test's timeout
        assert ready.startswith("READY"), ready + controller.communicate()[1]
        procs = [int(p) for p in ready.split()[1:]]
        start = time.monotonic()
        os.killpg(worker.pid, signal.SIGKILL)
        out, err = controller.communicate(timeout=90)
        took = time.monotonic() - start
    assert controller.returncode == 1, out + err
    assert "NOT REPORTED" not in out
    assert "stopped answering" in err and "Echo" in err, err
    assert "(the proc was lost" not in err, err  # said once
    assert not [p for p in procs if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    print(f"\nkilled worker reported {took:.2f} s after its SIGKILL")


STOPPING = """
import os, sys, time
from regency.actor import Actor, attach_to_workers, endpoint

class Slow(Actor):
    @endpoint
    def pid(self):
        return os.getpid()

    def __cleanup__(self, exc):
        print("CLEANING", flush=True)
        time.sleep(60)  # the stop waits on it: the worker dies meanwhile

hosts = attach_to_workers([sys.argv[1]])
procs = hosts.spawn_procs(per_host={"gpus": 1})
procs.spawn("slow", Slow).pid.call_one().get(timeout=60)
stopping = procs.stop()
print("STOPPING", flush=True)
stopping.get(timeout=90)
print("STOPPED", flush=True)
"""


def test_a_stop_ends_when_its_worker_is_killed_during_it(tmp_path: Path) -> None:
    """The stop's answer would come from the worker's agent: its loss answers it (it waited
    for ever before)."""
    with on_a_worker(tmp_path, STOPPING, merged=True) as (worker, controller):
        assert controller.stdout is not None
        seen = []
        for line in controller.stdout:  # bounded by the test's timeout
            seen.append(line)
            if "CLEANING" in line:
                break
        assert any("STOPPING" in ln for ln in seen), "".join(seen)
        start = time.monotonic()
        os.killpg(worker.pid, signal.SIGKILL)
        out, _ = controller.communicate(timeout=90)
        took = time.monotonic() - start
    assert "STOPPED" in out, "".join(seen) + out
    assert took < 60, took  # not the stop's own timeout
