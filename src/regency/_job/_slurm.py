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

import ipaddress
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._base import Job, JobError

__all__ = ["SlurmJob"]

_DONE = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
         "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"}


class SlurmJob(Job):
    """Worker hosts in one SLURM allocation: ``ntasks_per_node`` workers per node.

    Example::

        from regency.job import SlurmJob

        job = SlurmJob({"trainers": 4, "judges": 1}, partition="gpu", gpus_per_node=8,
                       time_limit="2:00:00")                   # Monarch's form
        state = job.state()
        procs = state.trainers.spawn_procs(per_host={"gpus": 8})   # {hosts: 4, gpus: 8}
        ...
        job.kill()                                              # scancel

        SlurmJob(nodes=4, partition="gpu")      # regency's older form: one mesh, "hosts"

    Every mesh's nodes come from the same ``sbatch`` allocation (nodes in mesh order).

    Args:
        meshes: mesh name -> nodes (Monarch's form), or a number of nodes for one mesh
            named ``mesh_name``.
        python_exe: the interpreter on the nodes (regency installed; default: this one).
        slurm_args: more ``#SBATCH`` lines, e.g. ``["--constraint=a100"]``.
        monarch_port: the port of the first worker on a node (+1 per further task; 0: any
            free port).
        job_name: SLURM's name for the job (default ``regency-<name>``).
        ntasks_per_node: workers (hosts) per node.
        time_limit, partition, exclusive, gpus_per_node, cpus_per_task, mem, account, qos:
            the usual sbatch options (None: not given).
        log_dir: where SLURM writes the job's output (default: the job cache's folder).
        job_start_timeout: seconds to wait for the allocation and every worker.
        out_of_cluster: the controller runs outside the cluster: workers advertise their IP
            address rather than their hostname (regency dials every worker directly; see
            ``docs/jobs.md``).
        attach_to: Monarch's worker gateway; regency has none (refused with a message).
        bind_to: the IP address workers listen on (default ``0.0.0.0``); they still
            advertise their hostname (or IP).
        nodes, python, port, start_timeout: regency's older names of ``meshes`` (as a
            number), ``python_exe``, ``monarch_port`` and ``job_start_timeout``.
        advertise: ``"hostname"`` (default), ``"ip"``, or a name: how workers are reached.
        rendezvous_dir: a folder shared by the controller and the nodes.
    """

    kind = "slurm"

    def __init__(self, meshes: Mapping[str, int] | int | None = None,
                 python_exe: str | None = None, slurm_args: Sequence[str] = (),
                 monarch_port: int | None = None, job_name: str | None = None,
                 ntasks_per_node: int = 1, time_limit: str | None = None,
                 partition: str | None = None, log_dir: str | os.PathLike[str] | None = None,
                 exclusive: bool = False, gpus_per_node: int | None = None,
                 cpus_per_task: int | None = None, mem: str | None = None,
                 job_start_timeout: float | None = None, account: str | None = None,
                 qos: str | None = None, out_of_cluster: bool = False,
                 attach_to: str | None = None, bind_to: str | None = None, *,
                 nodes: int | None = None, name: str = "slurm", python: str | None = None,
                 port: int = 26600, advertise: str | None = None,
                 rendezvous_dir: str | os.PathLike[str] | None = None,
                 start_timeout: float = 300.0, mesh_name: str = "hosts",
                 cache_dir: str | os.PathLike[str] | None = None) -> None:
        if attach_to is not None:
            raise ValueError(f"SlurmJob(attach_to={attach_to!r}): regency has no worker "
                             "gateway; the controller dials every worker directly. Run it "
                             "inside the cluster, or use out_of_cluster=True where worker IPs "
                             "are routable from here")
        self.meshes = _mesh_sizes(meshes, nodes, mesh_name)
        if ntasks_per_node < 1:
            raise ValueError("ntasks_per_node must be at least 1")
        super().__init__(name=name, mesh_name=next(iter(self.meshes)), cache_dir=cache_dir)
        self.ntasks_per_node = ntasks_per_node
        self.python = python_exe or python or sys.executable
        self.port = int(port if monarch_port is None else monarch_port)
        self.options = {"partition": partition, "time": time_limit, "account": account,
                        "qos": qos, "gpus-per-node": gpus_per_node,
                        "cpus-per-task": cpus_per_task, "mem": mem}
        self.exclusive = exclusive
        self.slurm_args = list(slurm_args)
        self.job_name = job_name or f"regency-{self.name}"
        self.advertise = advertise or ("ip" if out_of_cluster else "hostname")
        if bind_to is not None:
            try:
                bind_to = str(ipaddress.ip_address(bind_to))
            except ValueError:
                raise ValueError(f"SlurmJob(bind_to={bind_to!r}): give an IPv4 or IPv6 "
                                 "address, without a port") from None
        self.bind_to = bind_to
        self.slurm_log_dir = Path(log_dir) if log_dir else None
        self.rendezvous_dir = Path(rendezvous_dir) if rendezvous_dir else None
        self.start_timeout = float(start_timeout if job_start_timeout is None
                                   else job_start_timeout)

    @property
    def nodes(self) -> int:
        """How many nodes the allocation has (every mesh's)."""
        return sum(self.meshes.values())

    def _mesh_names(self) -> list[str]:
        return list(self.meshes)

    def add_mesh(self, name: str, num_nodes: int) -> None:
        """Add a mesh of ``num_nodes`` nodes to the job (before it is applied)."""
        self.meshes = {**self.meshes, **_mesh_sizes({name: num_nodes}, None, name)}

    def share_node(self, tasks_per_node: int, gpus_per_task: int, partition: str) -> None:
        """Share nodes with other jobs instead of taking them whole.

        The allocation stops being exclusive and asks, per node, for ``tasks_per_node``
        workers with ``gpus_per_task`` GPUs each on ``partition``; each task's CPUs and
        memory are the node's share per GPU (read with ``sinfo`` when it is on PATH, else
        left to SLURM's defaults).
        """
        if tasks_per_node < 1 or gpus_per_task < 0:
            raise ValueError("share_node: tasks_per_node >= 1 and gpus_per_task >= 0")
        self.exclusive = False
        self.ntasks_per_node = tasks_per_node
        self.options["partition"] = partition
        self.options["gpus-per-node"] = tasks_per_node * gpus_per_task or None
        node = _partition_node(partition)
        if node is not None and node["gpus"] and gpus_per_task:
            share = gpus_per_task / node["gpus"]
            self.options["cpus-per-task"] = max(1, int(node["cpus"] * share))
            self.options["mem"] = f"{max(1, int(node['mem_mb'] * share))}M"

    @property
    def size(self) -> int:
        """How many workers (hosts) the job has."""
        return self.nodes * self.ntasks_per_node

    def _spec(self) -> dict[str, Any]:
        return {"meshes": self.meshes, "ntasks_per_node": self.ntasks_per_node,
                "python": self.python, "port": self.port, "options": self.options,
                "exclusive": self.exclusive, "slurm_args": self.slurm_args,
                "job_name": self.job_name, "advertise": self.advertise,
                "bind_to": self.bind_to}

    @property
    def _slurm_logs(self) -> Path:
        path = self.slurm_log_dir or self.log_dir
        path.mkdir(parents=True, exist_ok=True)
        return path

    def script(self, rendezvous: Path) -> str:
        """The sbatch script (no secret in it: that comes through the environment)."""
        out = self._slurm_logs / "slurm-%j.out"
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
        if self.bind_to is not None:
            boot += ["--bind", self.bind_to]
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
                return self._by_mesh([entries[r] for r in sorted(entries)][: self.size])
            now = time.monotonic()
            if now >= next_check:
                st = job_state(job_id)
                if st is None or st in _DONE:
                    raise JobError(f"SLURM job {job_id} ended ({st or 'gone'}) before its "
                                   f"workers started; see {self._slurm_logs}/slurm-{job_id}.out:\n"
                                   f"{self._output_tail(job_id)}")
                next_check = now + 1.0
            if now > deadline:
                raise JobError(f"SLURM job {job_id}: {len(entries)} of {self.size} workers "
                               f"started within {self.start_timeout}s (state {st})")
            time.sleep(0.1)

    def _by_mesh(self, workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Label the workers (in rank order) with their mesh: each mesh takes its nodes'
        tasks in turn."""
        out: list[dict[str, Any]] = []
        for mesh, n in self.meshes.items():
            take = workers[len(out): len(out) + n * self.ntasks_per_node]
            out += [dict(w, mesh=mesh) for w in take]
        return out

    def _output_tail(self, job_id: str) -> str:
        try:
            text = (self._slurm_logs / f"slurm-{job_id}.out").read_text(errors="replace")
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


def _mesh_sizes(meshes: Mapping[str, int] | int | None, nodes: int | None,
                mesh_name: str) -> dict[str, int]:
    """The job's meshes: ``{name: nodes}`` from Monarch's dict or regency's node count."""
    if meshes is None:
        meshes = 1 if nodes is None else nodes
    elif nodes is not None:
        raise ValueError("SlurmJob: give meshes or nodes=, not both")
    sizes = {mesh_name: meshes} if isinstance(meshes, int) else dict(meshes)
    if not sizes:
        raise ValueError("SlurmJob needs at least one mesh: SlurmJob({'hosts': 2})")
    for mesh, n in sizes.items():
        if not isinstance(mesh, str) or not mesh.isidentifier():
            raise ValueError(f"SlurmJob: mesh name {mesh!r} must be a Python identifier")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"SlurmJob: mesh {mesh!r} needs a positive number of nodes, "
                             f"got {n!r}")
    return sizes


def _partition_node(partition: str) -> dict[str, int] | None:
    """CPUs, memory (MB) and GPUs of one node of ``partition`` from ``sinfo`` (or None)."""
    if shutil.which("sinfo") is None:
        return None
    res = subprocess.run(["sinfo", "-h", "-p", partition, "-o", "%c %m %G"],
                         capture_output=True, text=True, timeout=30)
    line = res.stdout.strip().splitlines()[0] if res.stdout.strip() else ""
    parts = line.split()
    if res.returncode != 0 or len(parts) < 3:
        return None
    gpus = 0
    for gres in parts[2].split(","):
        fields = gres.split("(")[0].split(":")
        if fields[0] == "gpu" and fields[-1].isdigit():
            gpus += int(fields[-1])
    try:
        return {"cpus": int(parts[0]), "mem_mb": int(parts[1].rstrip("+")), "gpus": gpus}
    except ValueError:
        return None
