"""Errors of remote ops that no fetch observed are reported on stderr, once, with where the
op was issued: at exit, or when the mesh stops. Real scripts in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = """
import torch
from regency import RemoteException, fetch_shard, remote
from regency.actor import this_host

def lost(t):
    raise ZeroDivisionError("nobody fetched this one")

def seen(t):
    raise KeyError("this one was fetched")

procs = this_host().spawn_procs(per_host={{"gpus": 2}})
with procs.activate():
    x = torch.ones(2)
    a = remote(lost, propagate=lambda t: t)(x)
    b = remote(seen, propagate=lambda t: t)(x)
    c = a + 1  # depends on the lost error: not a failure of its own
try:
    fetch_shard(b, gpus=1).get(timeout=60)
except RemoteException:
    print("fetched b's error", flush=True)
{end}
print("script done", flush=True)
"""


def _run(tmp_path: Path, end: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "unfetched.py"
    script.write_text(textwrap.dedent(SCRIPT.format(end=end)))
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=180, env=env, cwd=tmp_path)


def _check(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    assert "fetched b's error" in out.stdout
    err = out.stderr
    assert err.count("remote error(s) were never fetched") == 1, err
    assert "=== regency: 1 remote error(s) were never fetched ===" in err
    assert "failed on rank(s) 0, 1" in err
    assert "a = remote(lost, propagate=lambda t: t)(x)" in err  # where it was issued
    assert "ZeroDivisionError: nobody fetched this one" in err  # the worker's error
    assert "this one was fetched" not in err
    return err


@pytest.mark.timeout(240)
def test_unfetched_errors_are_reported_at_exit(tmp_path: Path) -> None:
    out = _run(tmp_path, "")
    _check(out)
    assert out.stdout.index("script done") >= 0


@pytest.mark.timeout(240)
def test_unfetched_errors_are_reported_when_the_mesh_stops(tmp_path: Path) -> None:
    out = _run(tmp_path, "procs.stop().get(timeout=60)\nprint('stopped', flush=True)")
    _check(out)
    assert "stopped" in out.stdout
