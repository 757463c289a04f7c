"""Batch runs: ``job.apply(client_script=...)`` runs the client detached, next to the workers.

The job is pickled to ``.regency/batch/<apply_id>.pkl``; the client runs as
``python SCRIPT`` in a session of its own (it outlives the caller), in the current
directory, with ``REGENCY_BATCH_JOB=1`` and ``REGENCY_JOB_STATE`` naming that pickle, its
output in ``.regency/logs/<name>-<apply_id>.log``. Inside it, ``job.state()`` reattaches to
the workers (see ``BatchJob``) instead of launching new ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._base import JobTrait

__all__ = ["run_client"]


def run_client(job: JobTrait, script: str) -> subprocess.Popen[bytes]:
    """Start ``script`` detached as ``job``'s batch client; its process.

    Raises:
        JobError: ``script`` is not a readable file.
    """
    from ._base import JobError

    if not os.path.isfile(script):
        raise JobError(f"job {job.name}: client_script {script!r} is not a file (relative to "
                       f"{os.getcwd()})")
    root = Path(".regency")
    state = root / "batch" / f"{job.apply_id}.pkl"
    job.dump(state)
    job._saved_to = None  # the batch's pickle belongs to the batch run
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, REGENCY_BATCH_JOB="1", REGENCY_JOB_STATE=str(state.resolve()))
    with open(logs / f"{job.name}-{job.apply_id}.log", "wb") as out:
        return subprocess.Popen([sys.executable, script], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
