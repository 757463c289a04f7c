"""``ProcessJob`` and ``LocalJob``: ``regency worker`` processes on this machine, each a host.

Each worker listens on a free loopback port (``tcp://127.0.0.1:0``; the port it got is read
from the line it prints) and runs in a session of its own, so that it outlives the
controller: a re-run of the controller reattaches to it. Its output goes to
``<cache>/NAME/worker-MESH-I.log``. Killing the job sends SIGTERM to each worker, then
SIGKILL to whatever of it (its fork server, its procs) is left after a grace period.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from ._base import JobError, JobTrait

if TYPE_CHECKING:
    from .._api._proc_mesh import HostMesh

__all__ = ["LocalJob", "ProcessJob"]

_LISTENING = re.compile(r"regency worker listening on (tcp:\S+)")
_GRACE = 3.0


class ProcessJob(JobTrait):
    """Host meshes of ``regency worker`` subprocesses on this machine (Monarch's ProcessJob).

    Example::

        from regency.job import ProcessJob

        job = ProcessJob({"trainers": 2, "generators": 1})
        state = job.state()                   # reuses live workers a previous run left
        procs = state.trainers.spawn_procs(per_host={"gpus": 2})   # {hosts: 2, gpus: 2}
        ...
        job.kill()

    Args:
        meshes: mesh name -> how many worker hosts it has.
        env: extra environment variables for the workers.
        name: the job's name in the job cache (default: one per working directory).
        python: the interpreter the workers run (default: this one).
        start_timeout: seconds to wait for every worker to listen.
        cache_dir: where the state file and logs go (default ``~/.cache/regency/jobs``).
    """

    kind = "process"

    def __init__(self, meshes: Mapping[str, int], env: Mapping[str, str] | None = None, *,
                 name: str | None = None, python: str | None = None,
                 start_timeout: float = 60.0,
                 cache_dir: str | os.PathLike[str] | None = None) -> None:
        meshes = dict(meshes)
        if not meshes:
            raise ValueError("ProcessJob needs at least one mesh: ProcessJob({'hosts': 2})")
        for mesh, n in meshes.items():
            if not isinstance(mesh, str) or not mesh.isidentifier():
                raise ValueError(f"mesh name {mesh!r} must be a Python identifier "
                                 "(state.NAME reads it)")
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(f"mesh {mesh!r}: the number of hosts must be a positive int, "
                                 f"got {n!r}")
        super().__init__(name=name, mesh_name=next(iter(meshes)), cache_dir=cache_dir)
        self.meshes = meshes
        self.env = dict(env or {})
        self.python = python or sys.executable
        self.start_timeout = start_timeout

    def _spec(self) -> dict[str, Any]:
        return {"meshes": self.meshes, "python": self.python, "env": self.env}

    def _mesh_names(self) -> list[str]:
        return list(self.meshes)

    def _launch(self, env: dict[str, str], secret: str) -> dict[str, Any]:
        env = {**env, **self.env}
        started: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        try:
            for mesh, n in self.meshes.items():
                for i in range(n):
                    started.append((mesh, *self._start_one(f"{mesh}-{i}", env)))
            deadline = time.monotonic() + self.start_timeout
            workers = [dict(self._await_listening(i, proc, log, deadline), mesh=mesh)
                       for i, (mesh, proc, log) in enumerate(started)]
        except BaseException:
            for _, proc, _ in started:
                _stop_tree(proc.pid, None)
            raise
        return {"workers": workers}

    def _start_one(self, label: str, env: dict[str, str]
                   ) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.log_dir / f"worker-{label}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [self.python, "-m", "regency", "worker", "--listen", "tcp://127.0.0.1:0",
                 "--advertise", "127.0.0.1"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, cwd=os.getcwd())
        return proc, log

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

    @property
    def process(self) -> subprocess.Popen[bytes]:
        """The batch client ``apply(client_script=...)`` started from this object.

        Raises:
            ValueError: this object started no batch client.
        """
        client = self.__dict__.get("_client")
        if client is None:
            raise ValueError(f"job {self.name}: no batch client was started from this object "
                             "(job.apply(client_script='train.py') starts one)")
        return client

    @classmethod
    def _alive(cls, recorded: dict[str, Any]) -> bool:
        return all(_same_process(w) is not None for w in recorded["workers"])

    @classmethod
    def _kill(cls, recorded: dict[str, Any]) -> None:
        procs = [p for p in map(_same_process, recorded.get("workers", [])) if p is not None]
        _stop_all(procs)
        for w in recorded.get("workers", []):
            _reap(int(w.get("pid", 0)))


class LocalJob(ProcessJob):
    """Worker hosts on this machine, for development and tests.

    ``LocalJob(hosts=N)`` starts N ``regency worker`` subprocesses forming one mesh
    (``state().hosts``, ``{hosts: N}``). ``LocalJob(hosts=("a", "b"))`` is Monarch's form:
    every named mesh is ``this_host()`` (no workers; nothing to reattach to).

    Example::

        from regency.job import LocalJob

        job = LocalJob(hosts=2)                       # or LocalJob(name="exp1", hosts=2)
        hosts = job.host_mesh()                       # {hosts: 2}
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        ...
        job.kill()                                    # or keep them for the next run

    Args:
        hosts: how many worker hosts, or mesh names that are each this host.
        name: the job's name: a later ``LocalJob`` of the same name and spec reuses the
            workers while they live.
        python: the interpreter the workers run (default: this one).
        start_timeout: seconds to wait for every worker to listen.
        mesh_name: the name of the mesh of ``hosts`` workers.
        cache_dir: where the state file and logs go (default ``~/.cache/regency/jobs``).
    """

    kind = "local"

    def __init__(self, hosts: int | Sequence[str] = 1, *, name: str = "local",
                 python: str | None = None, start_timeout: float = 60.0,
                 mesh_name: str = "hosts",
                 cache_dir: str | os.PathLike[str] | None = None) -> None:
        if isinstance(hosts, str):
            hosts = (hosts,)
        if not isinstance(hosts, int) and all(isinstance(h, str) for h in hosts) and hosts:
            self.here: tuple[str, ...] = tuple(hosts)
            super().__init__(dict.fromkeys(self.here, 1), name=name, python=python,
                             start_timeout=start_timeout, cache_dir=cache_dir)
            return
        if not isinstance(hosts, int) or isinstance(hosts, bool) or hosts < 1:
            raise ValueError(f"hosts must be a positive int (worker subprocesses) or mesh "
                             f"names (each this host), got {hosts!r}")
        self.here = ()
        super().__init__({mesh_name: hosts}, name=name, python=python,
                         start_timeout=start_timeout, cache_dir=cache_dir)

    @property
    def hosts(self) -> int:
        """How many worker hosts (0 in the this_host() form)."""
        return 0 if self.here else sum(self.meshes.values())

    def _spec(self) -> dict[str, Any]:
        if self.here:
            return {"here": list(self.here)}
        return {"hosts": self.hosts, "python": self.python}

    def _needs_secret(self) -> bool:
        return not self.here

    def _launch(self, env: dict[str, str], secret: str) -> dict[str, Any]:
        if self.here:
            return {"workers": []}
        return super()._launch(env, secret)

    def _connect(self, recorded: dict[str, Any]) -> dict[str, HostMesh]:
        if self.here:
            from .._api._proc_mesh import this_host

            return {h: this_host() for h in self.here}
        return super()._connect(recorded)

    @property
    def active(self) -> bool:
        """As for every job; in the this_host() form, True once applied (until killed)."""
        if self.here:
            return self._recorded is not None and self._status != "killed"
        return super().active


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
