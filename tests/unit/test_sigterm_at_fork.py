"""A SIGTERM sent to a proc's forked child before the child has its own disposition is not
lost (``_api/_terminate``): it waits, blocked, and ends the child once its handler is back
to the default. Before, Python dropped it (its C handler noted it for the proc's Python
handler, gone by the time it looked) and the child lived on."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)

WINDOW = """
import os, signal, sys
from regency._api import _terminate

def handler(sig, frame):
    print("caught by the proc's handler", flush=True)

signal.signal(signal.SIGTERM, handler)   # a proc's, inherited by the child it forks
_terminate._hold_sigterm()               # what happens before the fork
os.kill(os.getpid(), signal.SIGTERM)     # sent before the child has its own disposition
_terminate._not_in_a_fork(handler)       # the child's first step
print("lived on", flush=True)
"""


def test_a_sigterm_in_the_fork_window_ends_the_child() -> None:
    run = subprocess.run([sys.executable, "-c", WINDOW], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == -signal.SIGTERM, (run.returncode, run.stdout, run.stderr)
    assert run.stdout == ""


def test_the_parent_gets_its_mask_back_after_a_fork() -> None:
    from regency._api import _terminate

    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    _terminate._hold_sigterm()
    assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    _terminate._release_sigterm()
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
