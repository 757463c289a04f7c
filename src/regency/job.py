"""Jobs: launching worker hosts and attaching to them (Monarch's ``monarch.job``).

A job is a spec of host meshes; ``state()`` starts the workers with the scheduler's own tools
(subprocesses, ``ssh``, ``sbatch``/``srun``, Kubernetes pods), or reuses live ones a previous
run left, and hands back a :class:`JobState` whose attributes are the ``HostMesh`` es::

    from regency.job import ProcessJob

    job = ProcessJob({"trainers": 2})
    state = job.state()                      # pickled to .regency/job_state.pkl
    procs = state.trainers.spawn_procs(per_host={"gpus": 2})    # {hosts: 2, gpus: 2}
    ...
    job.kill()

Running the controller again reattaches to the same workers (the pickle, and the job cache
``~/.cache/regency/jobs/NAME.json``, record them); a stale record is detected and its workers
killed. See ``docs/jobs.md``.
"""

from __future__ import annotations

from ._job._base import (
    DEFAULT_JOB_PATH,
    BatchJob,
    Job,
    JobError,
    JobState,
    JobTrait,
    job_load,
    job_loads,
)
from ._job._exec import exec_command, hosts_from_config
from ._job._k8s import kubernetes_manifests, kubernetes_objects, kubernetes_worker_addresses
from ._job._k8s_job import KubernetesJob
from ._job._local import LocalJob, ProcessJob
from ._job._port_forward import PortForwarder
from ._job._service_ids import (
    SERVICE_PROC_IDS_ENV,
    SERVICE_PROC_RANK_ENV,
    deserialize_service_proc_ids,
    new_service_proc_id,
    ranked_service_proc_id_from_env,
    serialize_service_proc_ids,
    service_proc_addr,
    service_proc_addrs,
)
from ._job._shell import shell
from ._job._slurm import SlurmJob
from ._job._ssh import SSHJob
from ._job._telemetry import JobProfile, MeshAdminConfig, TelemetryConfig, TelemetryQueryClient


def load_current_job() -> JobTrait:
    """A fresh job object from the current context's spec (``.regency/<context>/spec``, as
    ``regency apply`` saved it); call ``.state()`` on it to reattach.

    Raises:
        FileNotFoundError: the current context has no spec (run ``regency apply`` first).
    """
    from ._cli import _jobs

    spec = _jobs._ctx() / "spec"
    try:
        text = spec.read_text().strip()
    except FileNotFoundError:
        raise FileNotFoundError(f"No spec found at {spec}. Run 'regency apply "
                                "<module.attr>' first.") from None
    job: JobTrait = _jobs._load_spec(text)
    return job


def set_current_job(module_path: str) -> None:
    """Save ``module_path`` (``module.attr``) as the current context's job spec, and point
    ``.regency/job_state.pkl`` at that context's state."""
    from ._cli import _jobs

    ctx = _jobs.current_context()
    folder = _jobs._ctx(ctx)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec").write_text(module_path + "\n")
    _jobs._link_current(ctx)


__all__ = [
    "DEFAULT_JOB_PATH",
    "SERVICE_PROC_IDS_ENV",
    "SERVICE_PROC_RANK_ENV",
    "BatchJob",
    "Job",
    "JobError",
    "JobProfile",
    "JobState",
    "JobTrait",
    "KubernetesJob",
    "LocalJob",
    "MeshAdminConfig",
    "PortForwarder",
    "ProcessJob",
    "SSHJob",
    "SlurmJob",
    "TelemetryConfig",
    "TelemetryQueryClient",
    "deserialize_service_proc_ids",
    "exec_command",
    "hosts_from_config",
    "job_load",
    "job_loads",
    "kubernetes_manifests",
    "kubernetes_objects",
    "kubernetes_worker_addresses",
    "load_current_job",
    "new_service_proc_id",
    "ranked_service_proc_id_from_env",
    "serialize_service_proc_ids",
    "service_proc_addr",
    "service_proc_addrs",
    "set_current_job",
    "shell",
]
