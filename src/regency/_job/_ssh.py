"""``SSHJob``: one ``regency worker`` per host, started over ``ssh``.

For each host we run ``ssh HOST '<command>'`` and keep the ssh client running for as long as
the worker lives (its output, relayed by ssh, goes to ``<cache>/NAME/HOST-I.log``). The remote
command reads the job secret from standard input (so it is on no command line, here or
there), prints its pid, and execs the worker::

    IFS= read -r REGENCY_SECRET; export REGENCY_SECRET PYTHONUNBUFFERED=1
    echo "regency-ssh-pid $$"
    exec PYTHON -m regency worker --listen tcp://BIND:PORT --advertise HOST [--label K=V ...]

The worker's address is ``tcp://HOST:PORT`` with HOST as given (without ``user@``) and PORT
as the worker printed it (so ``port=0`` works: each worker picks a free port). Killing the
job runs ``kill`` on each host over ssh; a re-run of the controller checks the recorded pids
over ssh (``kill -0``) before it reattaches.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from .._runtime._topology import parse_labels
from ._base import Job, JobError

__all__ = ["SSHJob"]

_PID = re.compile(r"regency-ssh-pid (\d+)")
_LISTENING = re.compile(r"regency worker listening on tcp:(?:\[[^\]]*\]|[^:\s]+):(\d+)")


class SSHJob(Job):
    """Worker hosts started with ``ssh`` on the given machines.

    Example::

        from regency.job import SSHJob

        job = SSHJob(hosts=["gpu1", "gpu2"], python="/opt/venv/bin/python")
        procs = job.host_mesh().spawn_procs(per_host={"gpus": 8})

    Args:
        hosts: ssh destinations (``host`` or ``user@host``); one worker each (repeat a host
            for several workers there, with ``port=0``).
        python: the interpreter on the remote hosts (regency must be installed for it).
        port: the port each worker listens on (0: any free port).
        bind: the address workers listen on (default all interfaces).
        advertise: how the controller and other hosts reach each host (default: the host
            part of each destination); a list, one per host.
        ssh: the ssh command; ``ssh_args`` are added before the destination (``-p``,
            ``-i KEY``, ``-o Option=value``...). ``BatchMode=yes`` is always set.
        env: extra environment variables for the workers.
        workdir: a folder to ``cd`` into on the remote hosts before starting.
        start_timeout: seconds to wait for every worker to listen.
        labels: each host's labels (``{"rack": "r1"}``), one mapping per host, for
            ``HostMesh.topology()`` and ``group_by`` (the worker's ``--label`` options).

    Raises:
        ValueError: no hosts, or ``advertise`` or ``labels`` not one per host, or a label
            that is not a name and a value (the host and label are named).
    """

    kind = "ssh"

    def __init__(self, hosts: Sequence[str], *, name: str = "ssh", python: str = "python3",
                 port: int = 26600, bind: str = "0.0.0.0",
                 advertise: Sequence[str] | None = None, ssh: str = "ssh",
                 ssh_args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 workdir: str | None = None, start_timeout: float = 60.0,
                 mesh_name: str = "hosts",
                 cache_dir: str | os.PathLike[str] | None = None,
                 labels: Sequence[Mapping[str, str]] | None = None) -> None:
        if isinstance(hosts, str) or not hosts:
            raise ValueError("hosts must be a non-empty list of ssh destinations")
        super().__init__(name=name, mesh_name=mesh_name, cache_dir=cache_dir)
        self.hosts = list(hosts)
        self.python = python
        self.port = int(port)
        self.bind = bind
        self.advertise = list(advertise) if advertise else [_host_part(h) for h in self.hosts]
        if len(self.advertise) != len(self.hosts):
            raise ValueError("advertise needs one entry per host")
        self.ssh_argv = [ssh, *ssh_args, "-o", "BatchMode=yes"]
        self.env = dict(env or {})
        self.workdir = workdir
        self.start_timeout = start_timeout
        self.labels = _checked_labels(self.hosts, labels)

    def _spec(self) -> dict[str, Any]:
        return {"hosts": self.hosts, "python": self.python, "port": self.port, "bind": self.bind,
                "advertise": self.advertise, "ssh": self.ssh_argv, "env": self.env,
                "workdir": self.workdir, "labels": self.labels}

    def remote_command(self, i: int) -> str:
        """The shell command run on host ``i`` (the secret arrives on its standard input)."""
        q = shlex.quote
        parts = ["IFS= read -r REGENCY_SECRET", "export REGENCY_SECRET PYTHONUNBUFFERED=1"]
        parts += [f"export {k}={q(v)}" for k, v in self.env.items()]
        if self.workdir:
            parts.append(f"cd {q(self.workdir)}")
        parts.append('echo "regency-ssh-pid $$"')
        label_args = "".join(f" --label {q(f'{k}={v}')}" for k, v in self.labels[i].items())
        parts.append(f"exec {q(self.python)} -m regency worker --listen "
                     f"{q(f'tcp://{self.bind}:{self.port}')} --advertise {q(self.advertise[i])}"
                     + label_args)
        return " && ".join(parts)

    def _launch(self, env: dict[str, str], secret: str) -> dict[str, Any]:
        started: list[tuple[subprocess.Popen[bytes], Path]] = []
        workers: list[dict[str, Any]] = []
        try:
            for i, host in enumerate(self.hosts):
                log = self.log_dir / f"{_safe(host)}-{i}.log"
                with open(log, "wb") as out:
                    proc = subprocess.Popen([*self.ssh_argv, host, self.remote_command(i)],
                                            stdin=subprocess.PIPE, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
                assert proc.stdin is not None
                try:
                    proc.stdin.write(secret.encode() + b"\n")
                    proc.stdin.close()
                except BrokenPipeError:  # ssh already ended: its exit status says why, below
                    pass
                started.append((proc, log))
            deadline = time.monotonic() + self.start_timeout
            for i, (proc, log) in enumerate(started):
                workers.append(self._await_worker(i, proc, log, deadline))
        except BaseException:
            for w in workers:
                _remote_kill(w)
            for proc, _ in started:
                if proc.poll() is None:
                    proc.kill()
            raise
        return {"workers": workers}

    def _await_worker(self, i: int, proc: subprocess.Popen[bytes], log: Path,
                      deadline: float) -> dict[str, Any]:
        delay = 0.01
        host = self.hosts[i]
        while True:
            text = log.read_text(errors="replace")
            pid, port = _PID.search(text), _LISTENING.search(text)
            if pid and port:
                return {"addr": f"tcp://{_bracket(self.advertise[i])}:{port.group(1)}",
                        "host": host, "pid": int(pid.group(1)), "ssh": self.ssh_argv,
                        "ssh_pid": proc.pid, "log": str(log)}
            if proc.poll() is not None:
                raise JobError(f"ssh to {host} exited with code {proc.returncode} before the "
                               f"worker listened; output ({log}):\n{_tail(text)}")
            if time.monotonic() > deadline:
                raise JobError(f"the worker on {host} did not listen within "
                               f"{self.start_timeout}s; output ({log}):\n{_tail(text)}")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    @classmethod
    def _alive(cls, recorded: dict[str, Any]) -> bool:
        for w in recorded["workers"]:
            res = subprocess.run([*w["ssh"], w["host"], f"kill -0 {int(w['pid'])}"],
                                 stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
            if res.returncode != 0:
                return False
        return True

    @classmethod
    def _kill(cls, recorded: dict[str, Any]) -> None:
        for w in recorded.get("workers", []):
            _remote_kill(w)


def _remote_kill(w: dict[str, Any]) -> None:
    """TERM the remote worker, KILL it after 3 s; then end the local ssh client."""
    pid = int(w["pid"])
    script = (f"kill -TERM {pid} 2>/dev/null || exit 0; i=0; "
              f"while kill -0 {pid} 2>/dev/null && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; "
              f"kill -KILL {pid} 2>/dev/null; exit 0")
    try:
        subprocess.run([*w["ssh"], w["host"], script], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        client = psutil.Process(int(w["ssh_pid"]))
        if "ssh" in " ".join(client.cmdline()):
            client.wait(timeout=5)
    except psutil.TimeoutExpired:
        client.kill()
    except (psutil.Error, KeyError, ValueError):
        pass


def _checked_labels(hosts: list[str], labels: Sequence[Mapping[str, str]] | None,
                    ) -> list[dict[str, str]]:
    """``labels``, one dict per host, each checked as the worker's ``--label`` would be."""
    if labels is None:
        return [{} for _ in hosts]
    if isinstance(labels, Mapping) or len(labels) != len(hosts):
        raise ValueError(f"labels needs one mapping per host ({len(hosts)}), e.g. "
                         "[{'rack': 'r1'}, {'rack': 'r2'}]; the same labels on every host "
                         "go in env={'REGENCY_HOST_LABELS': 'zone=a'}")
    out = []
    for host, given in zip(hosts, labels, strict=True):
        checked: dict[str, str] = {}
        for key, value in dict(given).items():
            try:
                one = parse_labels(f"{key}={value}")
            except ValueError as exc:
                raise ValueError(f"labels of host {host!r}: {exc}") from None
            if one != {key: value}:
                raise ValueError(f"labels of host {host!r}: {key!r}: {value!r} is not a label "
                                 "(a key of letters, digits, _ . -; a value without ',' ';' "
                                 "or spaces around it)")
            checked[key] = value
        out.append(checked)
    return out


def _host_part(dest: str) -> str:
    return dest.rsplit("@", 1)[-1]


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _safe(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", host)


def _tail(text: str, n: int = 20) -> str:
    return "\n".join(text.splitlines()[-n:])
