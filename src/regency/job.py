"""Launching worker hosts and attaching to them: ``LocalJob``, ``SSHJob``, ``SlurmJob``,
and Kubernetes manifests.

A job starts ``regency worker`` processes with the scheduler's own tools (subprocesses,
``ssh``, ``sbatch``/``srun``, a StatefulSet) and hands back a ``HostMesh`` over them::

    from regency.job import LocalJob

    job = LocalJob(hosts=2)
    procs = job.host_mesh().spawn_procs(per_host={"gpus": 2})    # {hosts: 2, gpus: 2}

Jobs remember their workers in ``~/.cache/regency/jobs/NAME.json``: running the controller
again with a job of the same name and spec reattaches to the live workers instead of
starting new ones. ``job.kill()`` stops them. See ``docs/multi-host.md``.
"""

from __future__ import annotations

from ._job._base import Job, JobError, JobState
from ._job._k8s import kubernetes_manifests, kubernetes_worker_addresses
from ._job._local import LocalJob
from ._job._slurm import SlurmJob
from ._job._ssh import SSHJob

__all__ = [
    "Job",
    "JobError",
    "JobState",
    "LocalJob",
    "SSHJob",
    "SlurmJob",
    "kubernetes_manifests",
    "kubernetes_worker_addresses",
]
