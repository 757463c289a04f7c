"""Procs come from the fork server (the zygote), not from the controller directly."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
from _pids import still_alive

from _actors import Counter
from regency.actor import this_host

T = 30


def test_procs_are_children_of_the_fork_server() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="forked")
    try:
        whos = list(procs.spawn("who", Counter).whoami.call().get(timeout=T).values())
        parents = {w["ppid"] for w in whos}
        assert os.getpid() not in parents
        assert len(parents) == 1
        zygote = psutil.Process(parents.pop())
        assert zygote.ppid() == os.getpid()  # the zygote is our child
        assert "regency._runtime._zygote" in " ".join(zygote.cmdline())
        assert os.getpgid(zygote.pid) == zygote.pid != os.getpgid(0)  # Ctrl-C is not its
    finally:
        procs.stop().get(timeout=T)


def test_the_fork_server_is_in_a_group_of_its_own_from_its_first_instruction() -> None:
    """A terminal's Ctrl-C while it starts (Python, then regency's imports) must not reach
    it: it killed it mid-import, and the controller reported a lost fork server."""
    from regency._runtime._host_agent import _own_process_group

    first = "import os, sys; sys.stdout.write(str(os.getpgid(0) == os.getpid()))"
    out = subprocess.run([sys.executable, "-S", "-c", first], capture_output=True, text=True,
                         timeout=T, check=True, **_own_process_group())
    assert out.stdout == "True"


def test_spawning_eight_procs_works() -> None:
    procs = this_host().spawn_procs(per_host={"procs": 8}, name="eight")
    try:
        assert procs.initialized.get(timeout=T) is True
        mesh = procs.spawn("eight", Counter, 0)
        pids = list(mesh.pid.call().get(timeout=T).values())
        assert len(set(pids)) == 8
        assert list(mesh.incr.call().get(timeout=T).values()) == [1] * 8
    finally:
        procs.stop().get(timeout=T)
    alive = still_alive(pids)
    assert not alive


def test_procs_see_the_controllers_current_environment_and_cwd(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("REGENCY_TEST_LATE_VAR", "set-after-start")
    monkeypatch.chdir(tmp_path)
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="env")
    try:
        from _actors import EnvProbe

        probe = procs.spawn("probe", EnvProbe).slice(gpus=0)
        env, cwd = probe.probe.call_one("REGENCY_TEST_LATE_VAR").get(timeout=T)
        assert env == "set-after-start"
        assert os.path.realpath(cwd) == os.path.realpath(tmp_path)
    finally:
        procs.stop().get(timeout=T)
