"""Shared fixtures and the process-leak guard for the test suite.

Every process regency starts on this machine (the fork server and every proc it forks)
inherits the controller's environment. We tag this pytest session's environment with a
unique id before anything starts, so that at the end of each test module and of the session
we can find *every* process this session caused, even ones that were reparented to init after
their parent died, and fail loudly if any is left.

* After each module: only the fork server (``regency._runtime._zygote``) may still be running
  (the runtime lives for the whole session); every proc must be gone.
* At the end of the session: ``shutdown_context()`` runs, and then nothing at all may be left.

Leftovers are killed after being reported, so that one leak does not cascade into others.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator

import psutil
import pytest

SESSION_TAG_VAR = "REGENCY_TEST_SESSION_TAG"
SESSION_TAG = uuid.uuid4().hex
os.environ[SESSION_TAG_VAR] = SESSION_TAG
# With no secret configured, regency keys connections with the user's secret file (ADR 0019):
# keep this session's in a folder of its own rather than in the developer's home.
os.environ["XDG_CONFIG_HOME"] = _CONFIG_HOME = tempfile.mkdtemp(prefix="regency-tests-config-")
atexit.register(shutil.rmtree, _CONFIG_HOME, True)

ZYGOTE_MARK = "regency._runtime._zygote"


def processes_tagged(var: str, tag: str) -> list[psutil.Process]:
    """Live (non-zombie) processes, other than this one, whose environment has var=tag."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(var) == tag:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def describe(procs: list[psutil.Process]) -> str:
    lines = []
    for p in procs:
        try:
            lines.append(f"  pid {p.pid} ppid {p.ppid()} {' '.join(p.cmdline())[:150]}")
        except psutil.Error:
            lines.append(f"  pid {p.pid} (gone)")
    return "\n".join(lines)


def is_fork_server(proc: psutil.Process) -> bool:
    """The zygote itself (its parent is us), not a proc it forked (same command line)."""
    try:
        return ZYGOTE_MARK in " ".join(proc.cmdline()) and proc.ppid() == os.getpid()
    except psutil.Error:
        return False


def wait_until_gone(var: str, tag: str, allow=lambda p: False, timeout: float = 8.0
                    ) -> list[psutil.Process]:
    """Poll until no tagged process (other than allowed ones) is alive; return the rest."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in processes_tagged(var, tag) if not allow(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def kill_all(procs: list[psutil.Process]) -> None:
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=3)


# -- failures nobody handled ------------------------------------------------------------------
# The default unhandled_fault_hook ends the program (fail fast), which would kill the whole
# pytest session on one bad test. Record them instead, and fail the test during which they
# arrived, unless it asked for them with the ``unhandled_failures`` fixture.
UNHANDLED: list = []


@pytest.fixture(autouse=True, scope="session")
def _record_unhandled_failures() -> Iterator[None]:
    import regency.actor as ra

    saved = ra.unhandled_fault_hook
    ra.unhandled_fault_hook = UNHANDLED.append
    yield
    ra.unhandled_fault_hook = saved


class FailureLog:
    """The failures that reached the root since the test started (read it any time)."""

    def __init__(self) -> None:
        self.start = len(UNHANDLED)

    def __call__(self) -> list:
        return list(UNHANDLED[self.start:])

    def wait_for(self, text: str, timeout: float = 10.0) -> list:
        """The failures so far, once one of their reports contains ``text`` (a failure and
        the report of its cause may come by different paths, in either order)."""
        deadline = time.monotonic() + timeout
        while not any(text in f.report() for f in self()):
            if time.monotonic() > deadline:
                reports = [f.report() for f in self()]
                raise AssertionError(f"no failure report with {text!r} in {timeout}s: {reports}")
            time.sleep(0.01)
        return self()


@pytest.fixture
def unhandled_failures() -> Iterator[FailureLog]:
    """For tests that provoke failures nobody handles: they inspect them instead of failing."""
    log = FailureLog()
    yield log
    del UNHANDLED[log.start:]


@pytest.fixture(autouse=True)
def _no_unhandled_failures(request) -> Iterator[None]:
    start = len(UNHANDLED)
    yield
    if "unhandled_failures" in request.fixturenames:
        return
    new = UNHANDLED[start:]
    if new:
        del UNHANDLED[start:]
        text = "\n\n".join(f.report() for f in new)
        pytest.fail(f"{len(new)} unhandled failure(s) reached the root during this test:\n"
                    + text, pytrace=False)


@pytest.fixture(autouse=True, scope="module")
def _no_procs_left_after_module() -> Iterator[None]:
    yield
    left = wait_until_gone(SESSION_TAG_VAR, SESSION_TAG, allow=is_fork_server)
    if left:
        text = describe(left)
        kill_all(left)
        pytest.fail("regency procs were left running after this test module:\n" + text,
                    pytrace=False)


@pytest.fixture(autouse=True, scope="session")
def _no_procs_left_after_session() -> Iterator[None]:
    yield
    import sys

    if "regency.actor" in sys.modules:
        from regency.actor import shutdown_context

        shutdown_context().get(timeout=15)
    left = wait_until_gone(SESSION_TAG_VAR, SESSION_TAG)
    if left:
        text = describe(left)
        kill_all(left)
        pytest.fail("processes were left running at the end of the test session:\n" + text,
                    pytrace=False)
