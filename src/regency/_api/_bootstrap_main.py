"""``python -m regency._api._bootstrap_main``: a proc started by a bootstrap command.

The fork server's child wrote what this proc should become (the same request a forked proc
gets) into a memory file and ``exec``-ed the command; this reads it back from the descriptor
named by ``REGENCY_PROC_SPEC_FD`` and serves as the proc.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any

from ._proc_main import run_proc


def _request() -> dict[str, Any]:
    fd_text = os.environ.pop("REGENCY_PROC_SPEC_FD", "")
    if not fd_text.isdigit():
        raise SystemExit("regency._api._bootstrap_main is started by regency for a proc (a "
                         "bootstrap command), not by hand: REGENCY_PROC_SPEC_FD is not set")
    fd = int(fd_text)
    with os.fdopen(fd, "rb") as f:
        req: dict[str, Any] = pickle.load(f)
    return req


def main() -> int:
    """Become the proc described by the request; returns its exit code."""
    req = _request()
    for path in req.get("sys_path", []):  # the spawner's modules (its script's folder, ...)
        if path and path not in sys.path:
            sys.path.append(path)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    return int(run_proc(req["spec"]) or 0)


if __name__ == "__main__":
    sys.exit(main())
