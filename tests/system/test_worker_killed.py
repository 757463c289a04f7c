"""A worker host killed outright (SIGKILL of its whole process group) is a failure the
controller reports and fails fast on, as for a frozen one. Before, its procs' connections
broke first, which only marked them unreachable: no report, and the program exited 0."""

from __future__ import annotations

import os
import signal
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


def test_a_killed_worker_is_reported_and_the_program_fails(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "REGENCY_SECRET": "killed-worker", "PYTHONUNBUFFERED": "1"}
    with loopback_worker(env) as (worker, address):
        controller = subprocess.Popen([sys.executable, str(script), address], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, start_new_session=True)
        try:
            assert controller.stdout is not None
            ready = controller.stdout.readline()  # bounded by the test's timeout
            assert ready.startswith("READY"), ready + controller.communicate()[1]
            procs = [int(p) for p in ready.split()[1:]]
            start = time.monotonic()
            os.killpg(worker.pid, signal.SIGKILL)
            out, err = controller.communicate(timeout=90)
            took = time.monotonic() - start
        finally:
            if controller.poll() is None:
                os.killpg(controller.pid, signal.SIGKILL)
    assert controller.returncode == 1, out + err
    assert "NOT REPORTED" not in out
    assert "stopped answering" in err and "Echo" in err, err
    assert "(the proc was lost" not in err, err  # said once
    assert not [p for p in procs if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    print(f"\nkilled worker reported {took:.2f} s after its SIGKILL")
