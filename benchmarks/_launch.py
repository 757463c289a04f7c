"""Launch and supervise the workload subprocesses of one framework run.

A framework run executes a list of workloads in as few subprocesses as possible: one
``benchmarks._child`` process runs them in order and reports events. Every workload gets a
hard timeout; when one times out (or the process dies) the process tree is killed, that
workload is recorded as failed, and a fresh subprocess continues with the remaining ones.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from benchmarks._common import Metrics, parse_event, repo_root

EXIT_GRACE_S = 30.0  # how long a child may take to exit after its last workload
REAP_TIMEOUT_S = 10.0  # how long what a run left behind may take to die once killed
STDERR_TAIL_LINES = 12


@dataclass
class Outcome:
    """What happened to one workload in one framework run."""

    status: str  # "ok", "error" or "timeout"
    metrics: Metrics = field(default_factory=dict)
    detail: str = ""
    seconds: float = 0.0


@dataclass
class FrameworkRun:
    """All outcomes of one framework run, plus what its subprocesses told about themselves."""

    framework: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def interpreter(framework: str) -> Path:
    """The Python that runs ``framework``: this one for regency, the peer venv otherwise."""
    if framework == "regency":
        return Path(sys.executable)
    return Path(repo_root()) / ".bench-venvs" / framework / "bin" / "python"


def child_env(framework: str) -> dict[str, str]:
    root = repo_root()
    paths = [root, os.path.join(root, "src")] if framework == "regency" else [root]
    old = os.environ.get("PYTHONPATH")
    env = dict(os.environ, BENCH_FRAMEWORK=framework, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([*paths, *([old] if old else [])])
    return env


def _reader(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _kill_tree(proc: subprocess.Popen[str]) -> None:
    """Kill the child, every descendant it still has, and anything left in its group."""
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    _kill_all(family)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own process group
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    _reap_session(proc.pid)


def _in_session(sid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and _running(p):
                found.append(p)  # (a zombie uses nothing; its parent or init reaps it)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return found


def _reap_session(sid: int) -> None:
    """Kill whatever the run left in its session (the child leads it) and wait until it is
    gone, so that the next run starts on a machine as quiet as this one did: a framework
    whose processes outlive its script (or take seconds to die) would load the next run.
    Only its session: a process that started a session of its own is out of reach."""
    left = _in_session(sid)
    if not left:
        return
    names = ", ".join(f"{p.pid}" for p in left[:8])
    print(f"[bench] the run left {len(left)} process(es) behind ({names}); killing them",
          file=sys.stderr, flush=True)
    _kill_all(left)
    _, alive = psutil.wait_procs(left, timeout=REAP_TIMEOUT_S)
    alive = [p for p in alive if _running(p)]
    if alive:
        print(f"[bench] {len(alive)} of them still there after {REAP_TIMEOUT_S:.0f} s: "
              f"{', '.join(str(p.pid) for p in alive[:8])}", file=sys.stderr, flush=True)


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _kill_all(procs: list[psutil.Process]) -> None:
    for p in procs:
        try:
            p.kill()
        except psutil.Error:  # gone already
            pass


def _stderr_tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-STDERR_TAIL_LINES:])


class _ChildSession:
    """One subprocess working through ``workloads``; fills ``run.outcomes``."""

    def __init__(
        self, run: FrameworkRun, workloads: list[str], quick: bool, timeout_s: float, log_path: Path
    ) -> None:
        self.run, self.workloads = run, workloads
        self.timeout_s, self.log_path = timeout_s, log_path
        self.current: str | None = None
        self.seen: set[str] = set()  # event kinds received so far
        self.started_at = time.perf_counter()
        cmd = [
            str(interpreter(run.framework)),
            "-m",
            "benchmarks._child",
            "--framework",
            run.framework,
            "--workloads",
            ",".join(workloads),
        ]
        if quick:
            cmd.append("--quick")
        self.stderr = log_path.open("a")
        self.proc = subprocess.Popen(
            cmd,
            cwd=repo_root(),
            env=child_env(run.framework),
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=_reader, args=(self.proc.stdout, self.lines), daemon=True).start()

    def pending(self) -> list[str]:
        return [w for w in self.workloads if w not in self.run.outcomes]

    def supervise(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        try:
            while True:
                if not self.pending():
                    deadline = min(deadline, time.monotonic() + EXIT_GRACE_S)
                try:
                    line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    self._on_timeout()
                    return
                if line is None:
                    self._on_exit()
                    return
                event = parse_event(line)
                if event is not None:
                    deadline = time.monotonic() + self.timeout_s
                    self._on_event(event)
        finally:
            _kill_tree(self.proc)
            self.stderr.close()

    def _on_event(self, event: dict[str, Any]) -> None:
        kind, name = event.get("event"), str(event.get("workload"))
        elapsed = time.perf_counter() - self.started_at
        self.seen.add(str(kind))
        if kind == "ready":
            self.run.info.update({k: v for k, v in event.items() if k not in ("event", "workload")})
        elif kind == "start":
            self.current, self.started_at = name, time.perf_counter()
        elif kind == "result":
            seconds = float(event.get("seconds", elapsed))
            self.run.outcomes[name] = Outcome("ok", event.get("metrics", {}), seconds=seconds)
            self.current = None
        elif kind == "error":
            self.run.outcomes[name] = Outcome(
                "error", detail=str(event.get("error")), seconds=elapsed
            )
            self.current = None

    def _on_timeout(self) -> None:
        if not self.pending():
            return  # every workload reported; the child only failed to exit in time
        if self.current is None and "ready" not in self.seen:
            # stuck while starting the framework: every pending workload would hang the same way
            for name in self.pending():
                self.run.outcomes[name] = Outcome(
                    "timeout", detail=f"framework start-up took over {self.timeout_s:.0f} s"
                )
            return
        name = self.current or self.pending()[0]
        self.run.outcomes[name] = Outcome(
            "timeout", detail=f"no result after {self.timeout_s:.0f} s", seconds=self.timeout_s
        )

    def _on_exit(self) -> None:
        try:
            rc = self.proc.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            rc = None
        if not self.pending() or (self.current is None and "start" in self.seen):
            return  # done, or died between workloads: run_framework restarts it for the rest
        self.stderr.flush()
        tail = _stderr_tail(self.log_path)
        last = tail.splitlines()[-1] if tail else "(no stderr)"
        detail = f"subprocess exited (rc={rc}): {last}\n{tail}"
        if self.current is not None:
            self.run.outcomes[self.current] = Outcome("error", detail=detail)
        else:  # it died before starting anything: the framework itself is broken
            for name in self.pending():
                self.run.outcomes[name] = Outcome("error", detail=detail)


def run_framework(
    framework: str, workloads: list[str], *, quick: bool, timeout_s: float, log_path: Path
) -> FrameworkRun:
    """Run ``workloads`` for ``framework``, restarting the subprocess after a hang or crash."""
    run = FrameworkRun(framework)
    remaining = list(workloads)
    while remaining:
        _ChildSession(run, remaining, quick, timeout_s, log_path).supervise()
        remaining = [w for w in remaining if w not in run.outcomes]
    return run
