"""The benchmark suite leaves no process of one framework run to load the next.

A real child in its own session starts a grandchild that outlives it (in the same session
but another process group, out of reach of ``killpg``); killing the run's tree must still
end it before the next run starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).parents[2]))
from benchmarks._launch import _in_session, _kill_tree  # noqa: E402

pytestmark = pytest.mark.timeout(60)

_GRANDCHILD = "import os, time; os.setpgid(0, 0); print(os.getpid(), flush=True); time.sleep(600)"
_CHILD = r"""
import subprocess, sys
grandchild = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE,
                              text=True)
print(grandchild.stdout.readline().strip(), flush=True)  # it runs, in its own group
"""


def test_what_a_run_leaves_in_its_session_is_killed_and_waited_for() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, _GRANDCHILD],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    grandchild = int(proc.stdout.readline())
    assert proc.wait(timeout=30) == 0  # the child is gone; its grandchild is not
    assert psutil.pid_exists(grandchild) and os.getsid(grandchild) == proc.pid
    assert os.getpgid(grandchild) != proc.pid  # killpg alone would miss it
    _kill_tree(proc)
    assert _in_session(proc.pid) == []  # (a zombie, not reaped yet, is not counted)
    assert not psutil.pid_exists(grandchild) or \
        psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
