"""Running regency scripts in a subprocess and finding the processes they left behind."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

TAG_VAR = "REGENCY_TEST_SCRIPT_TAG"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    tag: str
    pid: int


def run_script(tmp_path: Path, source: str, *, timeout: float = 40.0,
               env: dict[str, str] | None = None) -> Run:
    """Write ``source`` to a file and run it as ``python script.py`` (so its classes live in
    ``__main__``); every process it starts carries a unique tag in its environment."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    tag = uuid.uuid4().hex
    full_env = {**os.environ, TAG_VAR: tag, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        out, err = proc.communicate()
        kill_tagged(tag)
        raise AssertionError(
            f"script timed out after {timeout}s\nstdout:\n{out}\nstderr:\n{err}") from exc
    return Run(proc.returncode, out, err, tag, proc.pid)


def tagged(tag: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid == os.getpid():
            continue
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if p.environ().get(TAG_VAR) == tag:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_no_tagged(tag: str, timeout: float = 5.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while True:
        left = tagged(tag)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def kill_tagged(tag: str) -> None:
    procs = tagged(tag)
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=3)


def describe(run: Run) -> str:
    return f"rc={run.returncode}\n--- stdout ---\n{run.stdout}\n--- stderr ---\n{run.stderr}"


@contextlib.contextmanager
def loopback_worker(env: dict[str, str], *args: str
                    ) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A real ``regency worker`` listening on loopback TCP (``args``: more of its options),
    with its address; killed (its session) on the way out if it is still running."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "regency", "worker", "--listen", "tcp://127.0.0.1:0",
         "--advertise", "127.0.0.1", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=env, start_new_session=True)
    try:
        assert worker.stdout is not None
        seen = []
        for line in worker.stdout:  # bounded by the test's timeout
            seen.append(line)
            if "regency worker listening on" in line:
                break
        else:
            raise AssertionError("the worker exited:\n" + "".join(seen))
        yield worker, line.rsplit(" ", 1)[1].strip()
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, 9)
            worker.wait(timeout=30)
