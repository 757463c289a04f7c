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
from ._job._k8s import kubernetes_manifests, kubernetes_objects, kubernetes_worker_addresses
from ._job._k8s_job import KubernetesJob
from ._job._local import LocalJob, ProcessJob
from ._job._slurm import SlurmJob
from ._job._ssh import SSHJob


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
    "BatchJob",
    "Job",
    "JobError",
    "JobState",
    "JobTrait",
    "KubernetesJob",
    "LocalJob",
    "ProcessJob",
    "SSHJob",
    "SlurmJob",
    "job_load",
    "job_loads",
    "kubernetes_manifests",
    "kubernetes_objects",
    "kubernetes_worker_addresses",
    "load_current_job",
    "set_current_job",
]
