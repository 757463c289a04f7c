"""Chrome/Perfetto trace JSON of a time window: calls and spans, one track per proc.

The output is the Trace Event Format (``{"traceEvents": [...]}``) that ``ui.perfetto.dev`` and
``chrome://tracing`` open. Each proc is a process track (``pid``: its index, named by a
``process_name`` metadata event); each actor is a thread track inside it (``tid``; thread 0
is the proc itself). A recorded call is a complete event (``ph: "X"``) on the callee's
track, a span likewise on the actor that opened it. A flow (``ph: "s"`` on the caller's
track, ``ph: "f"`` bound to the callee's slice) joins caller and callee; the caller's side is
a one-microsecond ``send`` slice at the moment the callee began, since the sender's own time
is not recorded (that would put work on the caller's hot path).
"""

from __future__ import annotations

import sqlite3
from typing import Any

__all__ = ["trace_events", "trace_window"]


class _Tracks:
    """Process and thread numbers for procs and actors, with their name events."""

    def __init__(self, controller: str) -> None:
        self.controller = controller
        self.procs: dict[str, int] = {}
        self.threads: dict[tuple[int, str], int] = {}
        self.meta: list[dict[str, Any]] = []

    def proc(self, addr: str, label: str | None = None) -> int:
        pid = self.procs.get(addr)
        if pid is None:
            pid = self.procs[addr] = len(self.procs) + 1
            self.meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                              "args": {"name": label or addr}})
        return pid

    def thread(self, pid: int, actor: str) -> int:
        key = (pid, actor)
        tid = self.threads.get(key)
        if tid is None:
            tid = self.threads[key] = len(self.threads) + 1
            self.meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                              "args": {"name": actor}})
        return tid


def _labels(db: sqlite3.Connection) -> tuple[dict[str, str], dict[str, str], str]:
    """Proc labels, actor -> proc, and the controller's address."""
    labels: dict[str, str] = {}
    controller = ""
    for proc, mesh_name, rank, pid in db.execute(
            "SELECT proc, mesh_name, rank, pid FROM procs"):
        if mesh_name == "controller":
            controller = proc
            labels[proc] = f"controller (pid {pid})"
        else:
            labels[proc] = f"{mesh_name} rank {rank} (pid {pid})"
    where = dict(db.execute("SELECT actor, proc FROM actors"))
    return labels, where, controller


def trace_events(db: sqlite3.Connection, start_us: int | None = None,
                 end_us: int | None = None, limit: int = 200_000) -> dict[str, Any]:
    """The trace of calls and spans that started in ``[start_us, end_us]`` (all if None)."""
    lo = start_us if start_us is not None else 0
    hi = end_us if end_us is not None else 1 << 62
    labels, where, controller = _labels(db)
    tracks = _Tracks(controller)
    for proc in sorted(labels, key=lambda p: (p != controller, labels[p])):
        tracks.proc(proc, labels[proc])
    events: list[dict[str, Any]] = []
    flow = n = 0
    for start, end, proc, actor, caller, endpoint, size, ok in db.execute(
            "SELECT start_us, end_us, proc, actor, caller, endpoint, bytes, ok FROM calls "
            "WHERE start_us BETWEEN ? AND ? ORDER BY start_us LIMIT ?", (lo, hi, limit)):
        pid = tracks.proc(proc, labels.get(proc))
        tid = tracks.thread(pid, actor)
        n += 1
        events.append({"ph": "X", "name": endpoint, "cat": "call", "ts": start,
                       "dur": max(end - start, 1), "pid": pid, "tid": tid,
                       "args": {"caller": caller, "bytes": size, "ok": bool(ok)}})
        src_proc = controller if caller == "root" else where.get(caller)
        if src_proc is None:
            continue
        flow += 1
        spid = tracks.proc(src_proc, labels.get(src_proc))
        stid = tracks.thread(spid, caller)
        events.append({"ph": "X", "name": f"send {endpoint}", "cat": "send", "ts": start,
                       "dur": 1, "pid": spid, "tid": stid})
        events.append({"ph": "s", "name": "call", "cat": "flow", "id": flow, "ts": start,
                       "pid": spid, "tid": stid})
        events.append({"ph": "f", "bp": "e", "name": "call", "cat": "flow", "id": flow,
                       "ts": start, "pid": pid, "tid": tid})
    for start, end, proc, actor, name in db.execute(
            "SELECT start_us, end_us, proc, actor, name FROM spans WHERE start_us BETWEEN ? "
            "AND ? ORDER BY start_us LIMIT ?", (lo, hi, limit)):
        pid = tracks.proc(proc, labels.get(proc))
        tid = tracks.thread(pid, actor or "(no actor)")
        n += 1
        events.append({"ph": "X", "name": name, "cat": "span", "ts": start,
                       "dur": max(end - start, 1), "pid": pid, "tid": tid})
    return {"traceEvents": tracks.meta + events, "displayTimeUnit": "ms",
            "otherData": {"calls_and_spans": n, "procs": len(tracks.procs)}}


def trace_window(db: sqlite3.Connection, last_s: float | None = None,
                 start_us: int | None = None, end_us: int | None = None) -> dict[str, Any]:
    """The trace of the last ``last_s`` seconds recorded, or of an explicit window."""
    if last_s is not None:
        row = db.execute("SELECT max(end_us) FROM calls").fetchone()
        row2 = db.execute("SELECT max(end_us) FROM spans").fetchone()
        newest = max(row[0] or 0, row2[0] or 0)
        start_us, end_us = newest - int(last_s * 1e6), newest
    return trace_events(db, start_us, end_us)
