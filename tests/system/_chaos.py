"""Helpers of the chaos tier: a real ``regency worker`` subprocess whose output is watched
line by line, and a good controller run as a script that attaches to it and calls an actor.

Waits are on the worker's own log lines (a condition variable signalled by the thread that
reads them), never on sleeps.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SECRET = "chaos-test-secret"

CONTROLLER = r"""
import json, os, sys, time
t0 = time.monotonic()
from regency.actor import Actor, attach_to_workers, endpoint
import regency.actor as ra

class Echo(Actor):
    @endpoint
    def echo(self, x):
        return (os.getpid(), x)

ra.unhandled_fault_hook = lambda failure: None
hosts = attach_to_workers([sys.argv[1]])
attached = time.monotonic()
procs = hosts.spawn_procs(per_host={"gpus": 1})
echo = procs.spawn("echo", Echo)
pid, value = echo.echo.call_one("hello").get(timeout=60)
done = time.monotonic()
hosts.stop().get(timeout=60)
print(json.dumps({"ok": value == "hello", "attach_s": attached - t0, "call_s": done - t0}),
      flush=True)
"""


def env(**extra: str) -> dict[str, str]:
    """The environment of a worker or controller of these tests."""
    out = dict(os.environ)
    out["REGENCY_SECRET"] = SECRET
    out["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + out.get("PYTHONPATH", "")
    out.update(extra)
    return out


class Worker:
    """A ``regency worker`` on loopback; its output lines are kept and can be waited for."""

    def __init__(self, nofile: int | None = None, **extra_env: str) -> None:
        def limit() -> None:  # pragma: no cover - runs in the child
            if nofile is not None:
                _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))

        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "regency", "worker", "--listen", "tcp://127.0.0.1:0",
             "--advertise", "127.0.0.1"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(**extra_env),
            preexec_fn=limit, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        line = self.wait_for(lambda ln: "regency worker listening on" in ln, 60)
        self.address = line.rsplit(" ", 1)[1].strip()
        host_port = self.address.split(":", 1)[1]
        self.host, port = host_port.rsplit(":", 1)
        self.port = int(port)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.lines.append("<eof>")
            self.cond.notify_all()

    def wait_for(self, match: Callable[[str], bool], timeout: float, start: int = 0) -> str:
        """The first output line from index ``start`` on that ``match`` es (waits for it)."""
        deadline = time.monotonic() + timeout
        seen = start
        with self.cond:
            while True:
                for i in range(seen, len(self.lines)):
                    if match(self.lines[i]):
                        return self.lines[i]
                    if self.lines[i] == "<eof>":
                        raise AssertionError("the worker exited:\n" + "\n".join(self.lines))
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("no such line in time; output:\n"
                                         + "\n".join(self.lines[-40:]))
                self.cond.wait(left)

    def count(self, needle: str) -> int:
        """How many output lines contain ``needle``."""
        with self.cond:
            return sum(needle in ln for ln in self.lines)

    def rss_kib(self) -> int:
        """The worker's resident memory (KiB)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def fds(self) -> int:
        """How many descriptors the worker holds."""
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def wait_fds(self, at_most: int, timeout: float) -> int:
        """Wait until the worker holds at most ``at_most`` descriptors; how many it holds.

        Accepting again is not having descriptors free: the connections still in the
        listener's backlog are accepted, and hold one each, until their hang-up is read."""
        deadline = time.monotonic() + timeout
        while (held := self.fds()) > at_most:
            assert time.monotonic() < deadline, f"the worker still holds {held} descriptors"
            time.sleep(0.02)  # polled: /proc has no event for it; bounded by the deadline
        return held

    def stop(self) -> None:
        """Terminate the worker and its session (procs included)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(10)
        self._reader.join(10)


def run_controller(worker: Worker, timeout: float = 120.0) -> dict[str, Any]:
    """Attach a good controller to ``worker``, call an actor there; its JSON report."""
    t0 = time.monotonic()
    result = subprocess.run([sys.executable, "-c", CONTROLLER, worker.address],
                            capture_output=True, text=True, env=env(), timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    report["wall_s"] = time.monotonic() - t0
    return report


class Script:
    """A controller script run with a pipe to its stdin and its JSON lines read one by one."""

    def __init__(self, code: str, *args: str, **extra_env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=env(**extra_env), start_new_session=True)

    def next(self) -> dict[str, Any]:
        """The next JSON line it prints (its stdout closing is a failure)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                out: dict[str, Any] = json.loads(line)
                return out
        raise AssertionError(f"the script ended: {self.finish()}")

    def go_on(self) -> None:
        """Let it past its next ``sys.stdin.readline()``."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 60) -> str:
        """Wait for its exit; its stderr."""
        _, err = self.proc.communicate(timeout=timeout)
        return str(err)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


SPAWN_OUT_OF_FDS = r"""
import json, sys
from regency.actor import Actor, attach_to_workers, endpoint
import regency.actor as ra

class Echo(Actor):
    @endpoint
    def echo(self, x):
        return x

failures = []
ra.unhandled_fault_hook = lambda failure: failures.append(failure.report())
hosts = attach_to_workers([sys.argv[1]])
print(json.dumps({"stage": "attached"}), flush=True)

def attempt():
    try:
        procs = hosts.spawn_procs(per_host={"gpus": 1})
        return "ok: " + procs.spawn("echo", Echo).echo.call_one("hi").get(timeout=60)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"

sys.stdin.readline()  # the test filled the worker's descriptors
first = attempt()
print(json.dumps({"stage": "exhausted", "error": first, "failures": failures}), flush=True)
sys.stdin.readline()  # the test released them
print(json.dumps({"stage": "released", "outcome": attempt()}), flush=True)
hosts.stop().get(timeout=60)
"""
