"""Load only slows: a proc whose host agent is frozen past every deadline waits for it.

Issue 12: on a starved machine procs exited with status 0 at first use, because their
handshake with the host agent (in the controller) had a fixed 10 s bound and its end was
taken for the agent's death. Here the proc's bootstrap freezes the controller with SIGSTOP
(a detached shell thaws it later) just before the proc connects to its host agent, so the
proc's handshake surely waits longer than ``connect_timeout`` and than the old 10 s bound.
The proc must come up and answer; no supervision failure, no exit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _scripts import run_script

pytestmark = pytest.mark.timeout(120)

FREEZE_S = 12  # longer than the fixed bound that killed procs before (10 s) and connect_timeout

SCRIPT = """
import os
import signal
import subprocess

from regency import config
from regency.actor import Actor, endpoint, this_host

CONTROLLER = os.getpid()
FREEZE_S = FREEZE_PLACEHOLDER


def freeze_the_controller() -> None:
    # runs in the proc before it tells its host agent (in the controller) it is ready
    subprocess.Popen(["sh", "-c", f"sleep {FREEZE_S}; kill -CONT {CONTROLLER}"],
                     start_new_session=True)
    os.kill(CONTROLLER, signal.SIGSTOP)


class Echo(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()


if __name__ == "__main__":
    config.configure(connect_timeout=1.0)
    procs = this_host().spawn_procs(per_host={"procs": 1}, bootstrap=freeze_the_controller)
    procs.initialized.get(timeout=90)  # nothing has connected to the proc before this
    echo = procs.spawn("echo", Echo)
    print("answered", echo.pid.call_one().get(timeout=60) > 0, flush=True)
    procs.stop().get(timeout=30)
    print("done", flush=True)
""".replace("FREEZE_PLACEHOLDER", str(FREEZE_S))


def test_a_proc_waits_for_a_frozen_host_agent_instead_of_exiting(tmp_path: Path) -> None:
    run = run_script(tmp_path, SCRIPT, timeout=100)
    assert run.returncode == 0, run.stderr
    assert "answered True" in run.stdout and "done" in run.stdout, run.stdout + run.stderr
    assert "lost its connection to its host agent" not in run.stderr, run.stderr
    assert "failed" not in run.stderr, run.stderr


CUT_SCRIPT = """
from regency._runtime import _current
from regency.actor import Actor, SupervisionError, endpoint, this_host
import regency.actor as ra


class Cutter(Actor):
    @endpoint
    def cut(self) -> None:
        # what a host agent's death looks like from its proc: the connection ends
        rt = _current.get()
        conn = rt.router.peers[rt.host_agent].conn
        rt.loop.call_soon_threadsafe(conn.close)
        threading_event_never_set()


def threading_event_never_set() -> None:
    import threading
    threading.Event().wait(60)


if __name__ == "__main__":
    ra.unhandled_fault_hook = lambda failure: print("hook:", failure, flush=True)
    procs = this_host().spawn_procs(per_host={"procs": 1})
    cutter = procs.spawn("cutter", Cutter)
    try:
        cutter.cut.call_one().get(timeout=60)
    except SupervisionError as exc:
        print("refused:", exc, flush=True)
"""


def test_a_proc_that_loses_its_host_agent_says_so_and_never_exits_0(tmp_path: Path) -> None:
    run = run_script(tmp_path, CUT_SCRIPT, timeout=100)
    out = run.stdout + run.stderr
    assert "lost its connection to its host agent" in out, out  # its last line, quoted
    assert "exited with non-zero code 75 (it lost its connection to its host agent)" in out, out
    assert "code 0" not in out, out
