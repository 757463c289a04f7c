"""``SlurmJob``: one ``sbatch`` allocation whose ``srun`` starts a worker per task.

The job writes an sbatch script (kept in ``<cache>/NAME/``) whose body is one ``srun`` of the
worker bootstrap (:mod:`regency._job._boot`): each task becomes
``regency worker --listen tcp://0.0.0.0:PORT --advertise $(hostname)`` after writing its
address to a *rendezvous* folder, one ``RANK.json`` per task. The controller submits the
script with ``sbatch --parsable``, polls the folder until every task has written its entry
(and ``squeue`` while it waits, to report a job that failed or was cancelled), and attaches.
The secret reaches the tasks through the environment that ``sbatch`` exports (the default
``--export=ALL``); it is never written into the script.

The rendezvous folder must be visible to the controller and to every node: by default it
lies under the job cache (``~/.cache/regency/jobs/NAME/``, usually on a shared home); pass
``rendezvous_dir=`` otherwise. ``kill()`` runs ``scancel``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._base import Job, JobError

__all__ = ["SlurmJob"]

_DONE = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
         "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"}


class SlurmJob(Job):
    """Worker hosts in a SLURM allocation: ``nodes * ntasks_per_node`` workers.

    Example::

        from regency.job import SlurmJob

        job = SlurmJob(nodes=4, partition="gpu", gpus_per_node=8, time_limit="2:00:00")
        procs = job.host_mesh().spawn_procs(per_host={"gpus": 8})     # {hosts: 4, gpus: 8}
        ...
        job.kill()                                                      # scancel

    Args:
        nodes: nodes to allocate; ``ntasks_per_node`` workers (hosts) run on each.
        python: the interpreter on the nodes (regency installed; default: this one).
        port: the port of the first worker on a node (+1 per further task; 0: any free port).
        partition, time_limit, account, qos, gpus_per_node, cpus_per_task, mem, exclusive:
            the usual sbatch options (None: not given).
        slurm_args: more ``#SBATCH`` lines, e.g. ``["--constraint=a100"]``.
        advertise: ``"hostname"`` (default), ``"ip"``, or a name: how workers are reached.
        rendezvous_dir: a folder shared by the controller and the nodes.
        start_timeout: seconds to wait for the allocation and every worker.
    """

    kind = "slurm"

    def __init__(self, nodes: int = 1, *, name: str = "slurm", ntasks_per_node: int = 1,
                 python: str | None = None, port: int = 26600, partition: str | None = None,
                 time_limit: str | None = None, account: str | None = None,
                 qos: str | None = None, gpus_per_node: int | None = None,
                 cpus_per_task: int | None = None, mem: str | None = None,
                 exclusive: bool = False, slurm_args: Sequence[str] = (),
                 job_name: str | None = None, advertise: str = "hostname",
                 rendezvous_dir: str | os.PathLike[str] | None = None,
                 start_timeout: float = 300.0, mesh_name: str = "hosts",
                 cache_dir: str | os.PathLike[str] | None = None) -> None:
        if nodes < 1 or ntasks_per_node < 1:
            raise ValueError("nodes and ntasks_per_node must be at least 1")
        super().__init__(name=name, mesh_name=mesh_name, cache_dir=cache_dir)
        self.nodes = nodes
        self.ntasks_per_node = ntasks_per_node
        self.python = python or sys.executable
        self.port = int(port)
        self.options = {"partition": partition, "time": time_limit, "account": account,
                        "qos": qos, "gpus-per-node": gpus_per_node,
                        "cpus-per-task": cpus_per_task, "mem": mem}
        self.exclusive = exclusive
        self.slurm_args = list(slurm_args)
        self.job_name = job_name or f"regency-{self.name}"
        self.advertise = advertise
        self.rendezvous_dir = Path(rendezvous_dir) if rendezvous_dir else None
        self.start_timeout = start_timeout

    @property
    def size(self) -> int:
        """How many workers (hosts) the job has."""
        return self.nodes * self.ntasks_per_node

    def _spec(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "ntasks_per_node": self.ntasks_per_node,
                "python": self.python, "port": self.port, "options": self.options,
                "exclusive": self.exclusive, "slurm_args": self.slurm_args,
                "job_name": self.job_name, "advertise": self.advertise}

    def script(self, rendezvous: Path) -> str:
        """The sbatch script (no secret in it: that comes through the environment)."""
        out = self.log_dir / "slurm-%j.out"
        lines = ["#!/bin/bash", f"#SBATCH --job-name={self.job_name}",
                 f"#SBATCH --nodes={self.nodes}",
                 f"#SBATCH --ntasks-per-node={self.ntasks_per_node}",
                 f"#SBATCH --output={out}"]
        lines += [f"#SBATCH --{k}={v}" for k, v in self.options.items() if v is not None]
        if self.exclusive:
            lines.append("#SBATCH --exclusive")
        lines += [f"#SBATCH {a}" for a in self.slurm_args]
        boot = [self.python, "-m", "regency._job._boot", "--port", str(self.port),
                "--advertise", self.advertise, "--rendezvous", str(rendezvous)]
        lines += ["", "# one regency worker host per task; each writes its address to the",
                  "# rendezvous folder, where the controller finds it",
                  "export PYTHONUNBUFFERED=1",
                  "srun --kill-on-bad-exit=0 " + " ".join(shlex.quote(a) for a in boot), ""]
        return "\n".join(lines)

    def _preflight(self) -> None:
        for tool in ("sbatch", "squeue", "scancel"):
            if shutil.which(tool) is None:
                raise JobError(f"SlurmJob {self.name}: `{tool}` is not on PATH "
                               f"({os.environ.get('PATH', '')}); SLURM's client commands must "
                               "be installed where the controller runs")

    def _launch(self, env: dict[str, str], secret: str) -> dict[str, Any]:
        self._preflight()
        base = self.rendezvous_dir or self.log_dir
        rendezvous = base / f"rendezvous-{uuid.uuid4().hex[:8]}"
        rendezvous.mkdir(parents=True, mode=0o700)
        path = self.log_dir / "job.sbatch"
        path.write_text(self.script(rendezvous))
        res = subprocess.run(["sbatch", "--parsable", str(path)], env=env, capture_output=True,
                             text=True, timeout=60)
        if res.returncode != 0:
            raise JobError(f"sbatch failed ({res.returncode}): {res.stderr.strip()}")
        job_id = res.stdout.strip().split(";")[0]
        state: dict[str, Any] = {"job_id": job_id, "rendezvous": str(rendezvous),
                                 "script": str(path), "workers": []}
        try:
            state["workers"] = self._await_workers(job_id, rendezvous)
        except BaseException:
            type(self)._kill(state)
            raise
        return state

    def _await_workers(self, job_id: str, rendezvous: Path) -> list[dict[str, Any]]:
        deadline = time.monotonic() + self.start_timeout
        next_check = 0.0
        while True:
            entries = _read_entries(rendezvous)
            if len(entries) >= self.size:
                return [entries[r] for r in sorted(entries)][: self.size]
            now = time.monotonic()
            if now >= next_check:
                st = job_state(job_id)
                if st is None or st in _DONE:
                    raise JobError(f"SLURM job {job_id} ended ({st or 'gone'}) before its "
                                   f"workers started; see {self.log_dir}/slurm-{job_id}.out:\n"
                                   f"{self._output_tail(job_id)}")
                next_check = now + 1.0
            if now > deadline:
                raise JobError(f"SLURM job {job_id}: {len(entries)} of {self.size} workers "
                               f"started within {self.start_timeout}s (state {st})")
            time.sleep(0.1)

    def _output_tail(self, job_id: str) -> str:
        try:
            text = (self.log_dir / f"slurm-{job_id}.out").read_text(errors="replace")
        except OSError:
            return "(no output)"
        return "\n".join(text.splitlines()[-20:])

    @classmethod
    def _alive(cls, recorded: dict[str, Any]) -> bool:
        entries = _read_entries(Path(recorded["rendezvous"]))
        return (job_state(str(recorded["job_id"])) == "RUNNING"
                and len(entries) >= len(recorded["workers"]))

    @classmethod
    def _kill(cls, recorded: dict[str, Any]) -> None:
        job_id = str(recorded.get("job_id", ""))
        if job_id and shutil.which("scancel"):
            subprocess.run(["scancel", job_id], capture_output=True, timeout=60)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                st = job_state(job_id)
                if st is None or st in _DONE:
                    break
                time.sleep(0.2)
        rdv = recorded.get("rendezvous")
        if rdv:
            shutil.rmtree(rdv, ignore_errors=True)


def job_state(job_id: str) -> str | None:
    """The SLURM state of a job (``PENDING``, ``RUNNING``...), or None once it is gone."""
    res = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                         text=True, timeout=30)
    text = res.stdout.strip()
    if res.returncode != 0 or not text:
        return None
    return text.splitlines()[0].strip()


def _read_entries(folder: Path) -> dict[int, dict[str, Any]]:
    entries: dict[int, dict[str, Any]] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return entries
    for fname in names:
        if not fname.endswith(".json"):
            continue
        try:
            entry = json.loads((folder / fname).read_text())
            entries[int(entry["rank"])] = entry
        except (OSError, ValueError, KeyError):
            continue
    return entries
