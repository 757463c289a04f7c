"""Where jobs remember their workers: ``~/.cache/regency/jobs/NAME.json`` (and friends).

One JSON file per job name holds what is needed to find the workers again from a new
controller process: the launcher kind, the spec it was started with, and per worker its
address and pid (plus whatever the launcher needs to kill it). The job secret, when the job
generated one, lives beside it in ``NAME.secret``; both files are private to the user
(mode 0600). Writes are atomic (a temporary file renamed over the old one).

The folder is ``$REGENCY_JOB_CACHE`` when set, else ``$XDG_CACHE_HOME/regency/jobs``, else
``~/.cache/regency/jobs``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The folder of job state files (created, private to the user)."""
    if override is not None:
        base = Path(override)
    elif os.environ.get("REGENCY_JOB_CACHE"):
        base = Path(os.environ["REGENCY_JOB_CACHE"])
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = Path(xdg) / "regency" / "jobs"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base


def check_name(name: str) -> str:
    """A job name usable as a file name: letters, digits, ``_ . -`` (at most 100)."""
    if not _NAME.match(name):
        raise ValueError(f"job name {name!r}: use letters, digits, '_', '.' and '-' "
                         "(starting with a letter or digit, at most 100 characters)")
    return name


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by this user only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_private_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, readable by this user only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load(folder: Path, name: str) -> dict[str, Any] | None:
    """The cached state of job ``name``, or None (also for an unreadable file)."""
    try:
        data = json.loads((folder / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def save(folder: Path, name: str, state: dict[str, Any]) -> Path:
    """Record the state of job ``name``; returns the file."""
    path = folder / f"{name}.json"
    write_private(path, json.dumps(state, indent=2, sort_keys=True) + "\n")
    return path


def forget(folder: Path, name: str) -> None:
    """Remove the state (and secret) files of job ``name``."""
    for suffix in (".json", ".secret"):
        (folder / f"{name}{suffix}").unlink(missing_ok=True)


def load_secret(folder: Path, name: str) -> str | None:
    """The secret a previous run generated for job ``name``, if any."""
    try:
        text = (folder / f"{name}.secret").read_text().strip()
    except OSError:
        return None
    return text or None


def save_secret(folder: Path, name: str, secret: str) -> None:
    """Keep a generated job secret (mode 0600) so that a re-run can reattach."""
    write_private(folder / f"{name}.secret", secret + "\n")
