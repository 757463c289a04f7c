"""Where a job's database and its dashboard's address are kept, and how tools find them.

Each recording job writes ``<dir>/<job>.db`` (the store) and, while its HTTP API is up,
``<dir>/<job>.json`` (url, token, controller pid; mode 0600). ``<dir>`` is the config key
``observe_dir``, by default ``.regency/jobs`` under the controller's working directory.
``regency query``, ``trace``, ``top`` and ``dashboard`` take the newest job there unless
told which.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from .. import config

__all__ = ["find_db", "info_path", "job_dir", "read_info", "write_info"]


def job_dir(base: str | None = None) -> str:
    """The directory of job databases (``observe_dir``), made if missing."""
    path = base or str(config.get("observe_dir")) or os.path.join(".regency", "jobs")
    os.makedirs(path, exist_ok=True)
    return os.path.abspath(path)


def info_path(db: str) -> str:
    """Where the dashboard address of the job of database ``db`` is written."""
    return db[:-3] + ".json" if db.endswith(".db") else db + ".json"


def find_db(job: str | None = None, base: str | None = None) -> str:
    """The database of ``job`` (an id, or a path to a .db file), or of the newest job."""
    if job and (job.endswith(".db") or os.sep in job) and os.path.exists(job):
        return os.path.abspath(job)
    folder = job_dir(base)
    if job:
        path = os.path.join(folder, f"{job}.db")
        if not os.path.exists(path):
            raise FileNotFoundError(f"no database for job {job!r} in {folder} (the job must "
                                    "run with configure(observe=True) or REGENCY_OBSERVE=1)")
        return path
    found = sorted(glob.glob(os.path.join(folder, "*.db")), key=os.path.getmtime)
    if not found:
        raise FileNotFoundError(f"no job databases in {folder}: run the job with "
                                "configure(observe=True) or REGENCY_OBSERVE=1, or pass "
                                "--dir where its observe_dir was")
    return found[-1]


def write_info(db: str, info: dict[str, Any]) -> str:
    """Write a job's dashboard address and token next to its database (owner-only)."""
    path = info_path(db)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    return path


def read_info(db: str) -> dict[str, Any] | None:
    """The dashboard address of a job, if its API is up (or was, when it ended badly)."""
    try:
        with open(info_path(db)) as f:
            data: dict[str, Any] = json.load(f)
            return data
    except (OSError, ValueError):
        return None
