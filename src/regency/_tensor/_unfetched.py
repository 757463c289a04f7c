"""Errors no fetch observed, reported when their mesh stops or the controller exits.

A failed op only surfaces at the fetch of a value that depends on it; a program that never
fetches such a value would lose the error silently. So before a proc mesh stops, and at
exit for the meshes still running, the controller asks each worker for the ops that failed
there (after every op sent so far) and prints one report to stderr of those whose error no
fetch raised: the op, where the program issued it, the ranks, and the worker's traceback.
"""

from __future__ import annotations

import asyncio
import atexit
import sys
from typing import Any, TextIO

from ._errors import format_frames
from ._messages import WorkerError

__all__ = ["install", "report"]

TIMEOUT = 10.0  # seconds to wait for the workers' lists (they answer after their queued ops)
_installed = [False]


def install() -> None:
    """Report at exit and before a proc mesh stops (once per process)."""
    if _installed[0]:
        return
    _installed[0] = True
    from .._api import _proc_mesh

    _proc_mesh.before_stop.append(_on_stop)
    atexit.register(_at_exit)


def _on_stop(procs: Any) -> None:
    from ._mesh import _meshes

    try:
        asyncio.get_running_loop()
        return  # stop() from async code: it must not block here (exit reports the rest)
    except RuntimeError:
        pass
    report([m for key, m in list(_meshes.items()) if key[0] == procs._uid])


def _at_exit() -> None:
    from ._mesh import _meshes

    report(list(_meshes.values()))


def collect(meshes: list[Any]) -> list[tuple[Any, WorkerError, list[int]]]:
    """``(mesh, error, ranks)`` of each failed op that no fetch observed."""
    asks = []
    for mesh in meshes:
        if mesh.stopped:
            continue
        mesh.stopped = True  # asked once: its procs are stopping, or the program ends
        try:
            mesh.flush()
            asks.append((mesh, mesh.workers.unreported.call(sorted(mesh.seen))))
        except Exception:  # noqa: BLE001 - dead or stopped procs have nothing to say
            continue
    found: dict[tuple[int, int], tuple[Any, WorkerError, list[int]]] = {}
    for mesh, ask in asks:
        try:
            replies = ask.get(timeout=TIMEOUT)
        except Exception:  # noqa: BLE001 - as above; a report must not fail the stop
            continue
        for errors in replies.values():
            for err in errors:
                if err.seq in mesh.seen:
                    continue
                entry = found.setdefault((mesh.id, err.seq), (mesh, err, []))
                entry[2].append(err.rank)
    return sorted(found.values(), key=lambda e: (e[0].id, e[1].seq))


def report(meshes: list[Any], out: TextIO | None = None) -> int:
    """Print the report of ``meshes``' unobserved errors (nothing if none); how many."""
    entries = collect(meshes)
    if not entries:
        return 0
    lines = [f"=== regency: {len(entries)} remote error(s) were never fetched ==="]
    for i, (mesh, err, ranks) in enumerate(entries, 1):
        mesh.seen.add(err.seq)
        lines.append(f"[{i}] {err.fn} failed on rank(s) {', '.join(map(str, sorted(ranks)))}"
                     f" of {mesh!r} (op {err.seq})")
        lines.append("  issued on the controller at (most recent call last):")
        lines.append(_indent(format_frames(mesh._frames.get(err.seq)), "  "))
        lines.append("  error as reported from the worker (rank "
                     f"{min(ranks)}):")
        lines.append(_indent(err.message, "    "))
    lines.append("(fetch a value that depends on an op to raise its error as RemoteException)")
    print("\n".join(lines), file=out or sys.stderr, flush=True)
    return len(entries)


def _indent(text: str, pad: str) -> str:
    return "\n".join(pad + line for line in text.rstrip("\n").splitlines())
