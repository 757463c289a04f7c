"""How ``regency debug`` (and ``regency stack``) find the controllers running on this machine.

Each controller writes one file, ``controller-<pid>.json``, in a per-user runtime directory
(``$XDG_RUNTIME_DIR/regency``, else ``<tmp>/regency-<uid>``; the directory 0700, the file
0600, since it holds the job's handshake key): its address, its pid, its job, when it
started and what it runs. The file goes when the controller exits; a file whose process is
gone is stale and is removed by whoever finds it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Controller", "find", "remove", "runtime_dir", "write"]


@dataclass(frozen=True)
class Controller:
    """A running controller, as its discovery file describes it."""

    pid: int
    job: str
    address: str
    tcp: str
    key: bytes
    started: float
    argv: list[str]
    path: Path

    def describe(self) -> str:
        """One line: pid, job, command line and age."""
        age = max(0, int(time.time() - self.started))
        cmd = _shortened(" ".join(self.argv), 60) or "?"
        return f"pid {self.pid} (job {self.job}, {cmd}, running {age}s)"


def _shortened(text: str, width: int) -> str:
    """``text`` cut at a word boundary to fit ``width``, with "..." where it was cut."""
    if len(text) <= width:
        return text
    cut = text[:width - 3].rsplit(" ", 1)[0] if " " in text[:width - 3] else text[:width - 3]
    return cut + "..."


def runtime_dir() -> Path:
    """The per-user directory of discovery files (created 0700 when missing)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base) and os.access(base, os.W_OK):
        path = Path(base) / "regency"
    else:
        path = Path(tempfile.gettempdir()) / f"regency-{os.getuid()}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to another user: refusing to use it")
    return path


def write(job: str, address: str, key: bytes, tcp: str = "") -> Path:
    """Write this controller's discovery file (mode 0600); returns its path."""
    path = runtime_dir() / f"controller-{os.getpid()}.json"
    data = {"pid": os.getpid(), "job": job, "address": address, "tcp": tcp,
            "key": key.hex(), "started": time.time(), "argv": list(sys.argv)}
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)
    return path


def remove(path: Path) -> None:
    """Remove a discovery file (quietly when it is gone already)."""
    try:
        path.unlink()
    except OSError:
        pass


def find() -> list[Controller]:
    """The controllers running on this machine for this user, newest first."""
    found = []
    for path in runtime_dir().glob("controller-*.json"):
        try:
            data = json.loads(path.read_text())
            ctl = Controller(int(data["pid"]), str(data["job"]), str(data["address"]),
                             str(data.get("tcp", "")), bytes.fromhex(data["key"]),
                             float(data["started"]), list(data.get("argv", [])), path)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _alive(ctl.pid):
            found.append(ctl)
        else:
            remove(path)
    return sorted(found, key=lambda c: -c.started)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
