"""``LocalJob``: N ``regency worker`` processes on this machine, each one a host.

Each worker listens on a free loopback port (``tcp://127.0.0.1:0``; the port it got is read
from the line it prints) and runs in a session of its own, so that it outlives the
controller: a re-run of the controller reattaches to it. Its output goes to
``<cache>/NAME/worker-I.log``. Killing the job sends SIGTERM to each worker, then SIGKILL to
whatever of it (its fork server, its procs) is left after a grace period.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from ._base import Job, JobError

__all__ = ["LocalJob"]

_LISTENING = re.compile(r"regency worker listening on (tcp:\S+)")
_GRACE = 3.0


class LocalJob(Job):
    """``hosts`` worker hosts as subprocesses of this machine (for development and tests).

    Example::

        from regency.job import LocalJob

        job = LocalJob(hosts=2)                       # or LocalJob(name="exp1", hosts=2)
        hosts = job.host_mesh()                       # {hosts: 2}
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        ...
        job.kill()                                    # or keep them for the next run

    Args:
        hosts: how many worker hosts.
        name: the job's name: a later ``LocalJob`` of the same name and spec reuses the
            workers while they live.
        python: the interpreter the workers run (default: this one).
        start_timeout: seconds to wait for every worker to listen.
        cache_dir: where the state file and logs go (default ``~/.cache/regency/jobs``).
    """

    kind = "local"

    def __init__(self, hosts: int = 1, *, name: str = "local", python: str | None = None,
                 start_timeout: float = 60.0, mesh_name: str = "hosts",
                 cache_dir: str | os.PathLike[str] | None = None) -> None:
        if not isinstance(hosts, int) or hosts < 1:
            raise ValueError(f"hosts must be a positive int, got {hosts!r}")
        super().__init__(name=name, mesh_name=mesh_name, cache_dir=cache_dir)
        self.hosts = hosts
        self.python = python or sys.executable
        self.start_timeout = start_timeout

    def _spec(self) -> dict[str, Any]:
        return {"hosts": self.hosts, "python": self.python}

    def _launch(self, env: dict[str, str], secret: str) -> dict[str, Any]:
        started: list[tuple[subprocess.Popen[bytes], Path]] = []
        try:
            for i in range(self.hosts):
                log = self.log_dir / f"worker-{i}.log"
                with open(log, "wb") as out:
                    proc = subprocess.Popen(
                        [self.python, "-m", "regency", "worker", "--listen", "tcp://127.0.0.1:0",
                         "--advertise", "127.0.0.1"],
                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                        start_new_session=True, cwd=os.getcwd())
                started.append((proc, log))
            workers = [self._await_listening(i, proc, log, time.monotonic() + self.start_timeout)
                       for i, (proc, log) in enumerate(started)]
        except BaseException:
            for proc, _ in started:
                _stop_tree(proc.pid, None)
            raise
        return {"workers": workers}

    def _await_listening(self, i: int, proc: subprocess.Popen[bytes], log: Path,
                         deadline: float) -> dict[str, Any]:
        delay = 0.005
        while True:
            text = log.read_text(errors="replace")
            m = _LISTENING.search(text)
            if m:
                addr = m.group(1)
                return {"addr": addr, "pid": proc.pid, "log": str(log),
                        "create_time": psutil.Process(proc.pid).create_time()}
            if proc.poll() is not None:
                raise JobError(f"local worker {i} exited with code {proc.returncode} before "
                               f"listening; its output ({log}):\n{_tail(text)}")
            if time.monotonic() > deadline:
                raise JobError(f"local worker {i} did not listen within {self.start_timeout}s; "
                               f"its output ({log}):\n{_tail(text)}")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    @classmethod
    def _alive(cls, recorded: dict[str, Any]) -> bool:
        return all(_same_process(w) is not None for w in recorded["workers"])

    @classmethod
    def _kill(cls, recorded: dict[str, Any]) -> None:
        procs = [p for p in map(_same_process, recorded.get("workers", [])) if p is not None]
        _stop_all(procs)
        for w in recorded.get("workers", []):
            _reap(int(w.get("pid", 0)))


def _reap(pid: int) -> None:
    """Collect the exit status of a worker that is our own child (no zombie left)."""
    if pid <= 0:
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _same_process(w: dict[str, Any]) -> psutil.Process | None:
    """The live process recorded as ``w`` (same pid *and* start time), or None."""
    try:
        proc = psutil.Process(int(w["pid"]))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        if abs(proc.create_time() - float(w["create_time"])) > 0.05:
            return None  # the pid was reused by another process
        return proc
    except (psutil.Error, KeyError, ValueError, TypeError):
        return None


def _stop_tree(pid: int, proc: psutil.Process | None) -> None:
    """Stop one worker (see :func:`_stop_all`)."""
    try:
        _stop_all([proc or psutil.Process(pid)])
    except psutil.Error:
        pass
    _reap(pid)


def _stop_all(workers: list[psutil.Process]) -> None:
    """SIGTERM the workers, then SIGKILL whatever of them (and their descendants) outlives
    the grace period."""
    family: list[psutil.Process] = []
    for proc in workers:
        try:
            family += [proc, *proc.children(recursive=True)]
            proc.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(family, timeout=_GRACE)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=_GRACE)


def _tail(text: str, n: int = 20) -> str:
    return "\n".join(text.splitlines()[-n:])
