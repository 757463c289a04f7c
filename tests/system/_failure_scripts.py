"""Helpers for the failure tests that run whole controller programs in a subprocess.

* :func:`run_failing` writes a controller script into ``tmp_path`` (the shared
  :data:`PRELUDE` first: imports and a ``Victim`` actor that can fail in every way a rank can
  fail), runs it with a timeout and returns its exit code, output and timing. A script marks
  the moment it provokes the failure with ``mark("T0")``; ``Outcome.after_t0`` is the time
  from that mark to the process's exit, measured on the same clock.
* :class:`Controller` starts a script and leaves it running, for tests that signal it
  (SIGKILL, Ctrl-C) once it printed a line.
* :func:`wait_gone` polls (with a deadline) until processes have exited.

Every process a script starts carries ``REGENCY_TEST_SCRIPT_TAG`` (see ``_scripts.py``); the
``reap`` fixture of each test module kills whatever a script left behind.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from _scripts import TAG_VAR, kill_tagged, tagged

__all__ = [
    "PRELUDE",
    "Controller",
    "Outcome",
    "alive",
    "banner_count",
    "describe",
    "kill_tagged",
    "report_text",
    "run_failing",
    "tagged",
    "top_level_tracebacks",
    "wait_gone",
]

PRELUDE = '''
import ctypes, os, signal, subprocess, sys, time
import regency.actor as ra
from regency.actor import (Actor, ActorError, MeshFailure, SupervisionError, endpoint,
                           this_host, this_proc)


def mark(label):
    """Print ``label`` and the wall clock (the test compares it with the exit time)."""
    print(f"{label} {time.time():.6f}", flush=True)


class Abort(BaseException):
    """A BaseException that is not an Exception: it kills the actor."""


class Victim(Actor):
    def __init__(self, fail_init=False):
        if fail_init:
            print("constructing a doomed victim", flush=True)
            time.sleep(0.1)  # fail after spawn() returned: the race before is its own test
            raise ValueError("init failed on purpose")

    @endpoint
    def ping(self, x=None):
        return x

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def sleep(self, seconds):
        time.sleep(seconds)
        return "slept"

    @endpoint
    def boom(self, text="boom", delay=0.0):
        time.sleep(delay)
        raise ValueError(text)

    @endpoint
    def abort(self):
        raise Abort("a BaseException escaped the endpoint")

    @endpoint
    def system_exit(self, code=4):
        raise SystemExit(code)

    @endpoint
    def os_exit(self, code=3, delay=0.0):
        time.sleep(delay)
        os._exit(code)

    @endpoint
    def segfault(self):
        ctypes.string_at(0)

    @endpoint
    def sleeps(self):
        """Start three ``sleep``s: a child, one in its own session, and one in its own
        session with its own environment (only the fork server's end reaches it)."""
        bare = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        return [subprocess.Popen(["sleep", "600"], **kw).pid
                for kw in ({}, {"start_new_session": True},
                           {"start_new_session": True, "env": bare})]

    @endpoint
    def chatter(self, n, prefix="chatter line"):
        for i in range(n):
            print(f"{prefix} {i}", flush=True)

    @endpoint
    def alloc(self, mib):
        data = b"x" * (mib << 20)  # touches every page
        return len(data)


def spawn_victims(n=2, **kw):
    procs = this_host().spawn_procs(per_host={"gpus": n}, name="victims", **kw)
    victims = procs.spawn("victim", Victim)
    victims.ping.call("warm").get(timeout=20)
    return procs, victims
'''


@dataclass
class Outcome:
    """How a controller script ended."""

    returncode: int
    stdout: str
    stderr: str
    tag: str
    elapsed: float  # from start to exit
    marks: dict[str, float]  # label -> wall clock printed by mark(label)
    end: float  # wall clock at exit

    def after(self, label: str = "T0") -> float:
        """Seconds from ``mark(label)`` in the script to the process's exit."""
        assert label in self.marks, f"the script never printed {label}\n{describe(self)}"
        return self.end - self.marks[label]

    @property
    def after_t0(self) -> float:
        return self.after("T0")


_MARK = re.compile(r"^(\w+) (\d{9,}\.\d+)$")


def _marks(stdout: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in stdout.splitlines():
        m = _MARK.match(line.strip())
        if m:
            found.setdefault(m.group(1), float(m.group(2)))
    return found


def _write(tmp_path: Path, source: str, prelude: bool, name: str) -> Path:
    script = tmp_path / name
    body = textwrap.dedent(source)
    script.write_text((textwrap.dedent(PRELUDE) + "\n" + body) if prelude else body)
    return script


def _env(tag: str, extra: dict[str, str] | None) -> dict[str, str]:
    return {**os.environ, TAG_VAR: tag, "PYTHONUNBUFFERED": "1", **(extra or {})}


def run_failing(tmp_path: Path, source: str, *, timeout: float = 30.0,
                env: dict[str, str] | None = None, prelude: bool = True,
                name: str = "controller.py") -> Outcome:
    """Run ``PRELUDE + source`` as ``python controller.py`` in ``tmp_path``; never hangs."""
    script = _write(tmp_path, source, prelude, name)
    tag = uuid.uuid4().hex
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=_env(tag, env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        out, err = proc.communicate()
        kill_tagged(tag)
        raise AssertionError(f"the controller hung: still running after {timeout}s\n"
                             f"--- stdout ---\n{out}\n--- stderr ---\n{err}") from exc
    end = time.time()
    return Outcome(proc.returncode, out, err, tag, time.monotonic() - start, _marks(out), end)


class Controller:
    """A controller script left running, to be signalled by the test."""

    def __init__(self, tmp_path: Path, source: str, *, env: dict[str, str] | None = None,
                 prelude: bool = True, name: str = "controller.py") -> None:
        script = _write(tmp_path, source, prelude, name)
        self.tag = uuid.uuid4().hex
        self.proc = subprocess.Popen(
            [sys.executable, str(script)], cwd=tmp_path, env=_env(self.tag, env),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines), daemon=True
                         ).start()
        self._err_pump = threading.Thread(target=self._pump_err, daemon=True)
        self._err_pump.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @staticmethod
    def _pump(stream, lines: queue.Queue[str | None]) -> None:  # type: ignore[no-untyped-def]
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def wait_line(self, prefix: str, timeout: float = 20.0) -> str:
        """The first stdout line starting with ``prefix`` (fails after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"the controller exited before printing {prefix!r}:\n"
                                     + self.text())
            self.stdout.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line {prefix!r} within {timeout}s:\n" + self.text())

    def send(self, sig: int) -> float:
        """Send ``sig`` to the controller; returns the monotonic time it was sent."""
        now = time.monotonic()
        os.kill(self.proc.pid, sig)
        return now

    def wait(self, timeout: float = 20.0) -> int:
        """Wait for the controller to exit; fails (after killing it) past ``timeout``."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the controller did not exit within {timeout}s:\n"
                                 + self.text()) from None
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # drain what is left of stdout
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.stdout.append(line)
        # and of stderr: its reader may not have run since the exit (a busy machine)
        self._err_pump.join(max(0.0, deadline - time.monotonic()))
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def text(self) -> str:
        return ("--- stdout ---\n" + "\n".join(self.stdout) + "\n--- stderr ---\n"
                + "\n".join(self.stderr))


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (zombies count as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: list[int], timeout: float) -> tuple[list[int], float]:
    """Poll until every pid has exited; returns (the ones still alive, seconds waited)."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() >= deadline:
            return left, time.monotonic() - start
        time.sleep(0.02)


def descendants(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


BANNER = "=== regency: unhandled failure"


def banner_count(text: str) -> int:
    return text.count(BANNER)


def report_text(stderr: str) -> str:
    """The fail-fast report in ``stderr`` (from the banner on), or '' if there is none."""
    i = stderr.find(BANNER)
    return stderr[i:] if i >= 0 else ""


def top_level_tracebacks(stderr: str) -> list[str]:
    """Python tracebacks printed at column 0 (the report indents the remote ones)."""
    return [ln for ln in stderr.splitlines() if ln.startswith("Traceback (most recent call")]


def describe(run: Outcome | Controller) -> str:
    if isinstance(run, Controller):
        return run.text()
    return (f"rc={run.returncode} elapsed={run.elapsed:.2f}s marks={run.marks}\n"
            f"--- stdout ---\n{run.stdout}\n--- stderr ---\n{run.stderr}")


def poll(what: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Call ``what`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing after {timeout}s from {what}")
        time.sleep(0.02)
