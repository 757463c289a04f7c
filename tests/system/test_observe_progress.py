"""The spawn progress line: drawn on a terminal while a mesh comes up, quiet on a pipe."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from regency._observe._progress import progress_line, watch_spawn

SCRIPT = textwrap.dedent("""
    import time
    from regency.actor import this_host
    procs = this_host().spawn_procs(per_host={"procs": 6}, name="slowpoke",
                                    bootstrap=lambda: time.sleep(1.0))
    procs.initialized.get(timeout=60)
    procs.stop().get(timeout=30)
    print("END", flush=True)
""")


def test_progress_line_text() -> None:
    assert progress_line("m", 3, 12, 2, 1.25) == (
        "spawning m: [#####...............] 3/12 procs up (2 hosts, 1.2s)")
    assert progress_line("m", 12, 12, 1, 2.0, done=True) == (
        "spawned m: 12 procs up on 1 host in 2.0s")
    assert "failed after 2/4" in progress_line("m", 2, 4, 1, 1.0, done=True, failed=True)


def test_quiet_when_not_a_terminal() -> None:
    assert watch_spawn(object(), 4, 1, "m", io.StringIO()) is None


def test_drawn_on_a_terminal(tmp_path: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    script = tmp_path / "spawn.py"
    script.write_text(SCRIPT)
    child = pexpect.spawn(sys.executable, [str(script)], cwd=str(tmp_path), timeout=60,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}, encoding="utf-8")
    try:
        child.expect(r"spawning slowpoke: \[[#.]+\] \d/6 procs up \(1 host")
        child.expect(r"spawned slowpoke: 6 procs up on 1 host in [0-9.]+s\r\n")
        child.expect(pexpect.EOF)
        assert "END" in child.before  # the script stops its procs before it prints END
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_nothing_on_a_pipe(tmp_path: Path) -> None:
    script = tmp_path / "spawn.py"
    script.write_text(SCRIPT)
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "procs up" not in run.stderr + run.stdout
