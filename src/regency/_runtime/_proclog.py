"""Every proc's whole output, on disk for the job: what the terminal shows may be less.

The host agent appends each line a proc prints (stdout and stderr, in the order read, the
stderr lines marked) to one file per proc, named after the proc's address, in
``<tmp>/regency-<uid>/logs/`` of the proc's machine (``log_dir`` to choose another place).
Forwarding may aggregate or filter what reaches the controller's terminal; the file keeps
everything, and failure reports name it. Files stay after the job for reading (a week: older
ones are removed when a process first writes there); nothing bounds their size.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path
from typing import IO

from .. import config

__all__ = ["close", "log_path", "write"]

_open: dict[str, IO[str]] = {}
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def log_dir() -> Path:
    """Where proc logs go on this machine."""
    chosen = str(config.get("log_dir") or "")
    if chosen:
        return Path(chosen)
    return Path(tempfile.gettempdir()) / f"regency-{os.getuid()}" / "logs"


def log_path(addr: str) -> Path:
    """The log file of the proc at ``addr`` (on the machine that runs it)."""
    return log_dir() / (_SAFE.sub("_", addr).strip("_") + ".log")


def write(addr: str, kind: str, lines: list[str]) -> None:
    """Append ``lines`` a proc printed on ``kind`` ("stdout"/"stderr"); never raises."""
    f = _open.get(addr)
    try:
        if f is None:
            path = log_path(addr)
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _prune(path.parent)
            f = _open[addr] = open(path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
        mark = "! " if kind == "stderr" else "  "
        f.write("".join(f"{mark}{line}\n" for line in lines))
        f.flush()
    except OSError:
        pass


#: Log files older than this are removed when a process first writes to the directory.
KEEP_S = 7 * 24 * 3600.0
_pruned: set[Path] = set()


def _prune(directory: Path) -> None:
    if directory in _pruned:
        return
    _pruned.add(directory)
    cutoff = time.time() - KEEP_S
    for old in directory.glob("*.log"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            continue


def close(addr: str) -> None:
    """The proc is gone: close its file (it stays on disk)."""
    f = _open.pop(addr, None)
    if f is not None:
        try:
            f.close()
        except OSError:
            pass
