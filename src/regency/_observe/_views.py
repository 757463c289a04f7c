"""What the HTTP API answers, computed from a job's database (read-only).

Each function takes a read-only connection and plain arguments and returns JSON-ready data;
``_server.py`` maps URLs onto them. The shapes are documented in docs/observability.md.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

__all__ = ["CALL_FIELDS", "calls", "events", "logs", "summary", "throughput", "tree"]

_LOG_TAIL = 5


def _dicts(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    cols = [d[0] for d in cur.description or ()]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def summary(db: sqlite3.Connection) -> dict[str, Any]:
    """The job: id, counts of procs and actors by state, failures, newest time recorded."""
    job = dict(db.execute("SELECT key, value FROM job").fetchall())
    procs = dict(db.execute("SELECT state, count(*) FROM procs GROUP BY state").fetchall())
    actors = dict(db.execute("SELECT state, count(*) FROM actors GROUP BY state").fetchall())
    failures = db.execute("SELECT count(*) FROM events WHERE kind='failure'").fetchone()[0]
    newest = db.execute("SELECT max(ts_us) FROM events").fetchone()[0]
    return {"job": job, "procs": procs, "actors": actors, "failures": failures,
            "newest_us": newest}


def tree(db: sqlite3.Connection, log_tail: int = _LOG_TAIL) -> dict[str, Any]:
    """Hosts -> procs -> actors, each with its state and latest sample."""
    procs = _dicts(db.execute(
        "SELECT proc, mesh, mesh_name, rank, host, pid, state, started_us, ended_us, cause, "
        "cpu, rss, sampled_us FROM procs ORDER BY mesh_name != 'controller', mesh, rank"))
    actors = _dicts(db.execute(
        "SELECT actor, mesh, name, class, rank, proc, state, started_us, ended_us, failure, "
        "queue, handled, rate FROM actors ORDER BY mesh, actor"))
    by_proc: dict[str, list[dict[str, Any]]] = {}
    for a in actors:
        by_proc.setdefault(a.pop("proc") or "", []).append(a)
    failures = _last_failures(db)
    tails = _log_tails(db, log_tail)
    hosts: dict[str, list[dict[str, Any]]] = {}
    for p in procs:
        addr = p["proc"]
        p["actors"] = by_proc.get(addr, [])
        p["last_failure"] = failures.get(addr)
        p["log_tail"] = tails.get(addr, [])
        p["rate"] = round(sum(a["rate"] or 0 for a in p["actors"]), 2)
        p["queue"] = sum(a["queue"] or 0 for a in p["actors"])
        hosts.setdefault(p["host"] or "?", []).append(p)
    return {"hosts": [{"host": h, "procs": ps} for h, ps in hosts.items()]}


def _last_failures(db: sqlite3.Connection) -> dict[str, str]:
    out: dict[str, str] = {}
    for proc, summary_ in db.execute(
            "SELECT coalesce(a.proc, e.proc), e.summary FROM events e LEFT JOIN actors a "
            "ON a.actor = e.actor WHERE e.kind='failure' ORDER BY e.ts_us"):
        out[proc] = summary_
    return out


def _log_tails(db: sqlite3.Connection, n: int) -> dict[str, list[str]]:
    """The last ``n`` lines of each proc: one indexed look-up per proc (``logs_proc``), so
    the cost follows the number of procs, not the length of the logs."""
    if n <= 0:
        return {}
    out: dict[str, list[str]] = {}
    procs = [r[0] for r in db.execute("SELECT proc FROM procs")]
    for proc in procs:
        lines = [line for (line,) in db.execute(
            "SELECT line FROM logs WHERE proc = ? ORDER BY ts_us DESC, rowid DESC LIMIT ?",
            (proc, n))]
        if lines:
            lines.reverse()
            out[proc] = lines
    return out


def events(db: sqlite3.Connection, since_us: int = 0, kind: str | None = None,
           limit: int = 500) -> list[dict[str, Any]]:
    """Events after ``since_us`` (newest last), optionally of one kind."""
    sql = "SELECT ts_us, kind, proc, actor, mesh, summary, detail FROM events WHERE ts_us > ?"
    args: list[Any] = [since_us]
    if kind:
        sql += " AND kind = ?"
        args.append(kind)
    sql += " ORDER BY ts_us DESC LIMIT ?"
    args.append(limit)
    rows = _dicts(db.execute(sql, args))
    for r in rows:
        r["detail"] = json.loads(r["detail"]) if r["detail"] else None
    rows.reverse()
    return rows


CALL_FIELDS = ("start_us", "end_us", "proc", "actor", "caller", "mesh", "endpoint", "bytes",
               "ok")


def calls(db: sqlite3.Connection, start_us: int | None = None, end_us: int | None = None,
          limit: int = 2000, fields: list[str] | None = None) -> list[dict[str, Any]]:
    """Recorded calls that started in the window (default: the last 10 s recorded), with
    all of ``CALL_FIELDS`` or only ``fields``."""
    cols = list(fields or CALL_FIELDS)
    wrong = [f for f in cols if f not in CALL_FIELDS]
    if wrong:
        raise ValueError(f"no call field {wrong[0]!r}; the fields are {', '.join(CALL_FIELDS)}")
    if start_us is None:
        newest = db.execute("SELECT max(start_us) FROM calls").fetchone()[0] or 0
        start_us = newest - 10_000_000
    rows = _dicts(db.execute(
        f"SELECT {', '.join(cols)} FROM calls WHERE start_us >= ? AND start_us <= ? "
        "ORDER BY start_us DESC LIMIT ?",
        (start_us, end_us if end_us is not None else 1 << 62, limit)))
    rows.reverse()
    return rows


def logs(db: sqlite3.Connection, proc: str | None = None, search: str | None = None,
         limit: int = 200) -> list[dict[str, Any]]:
    """The newest log lines (newest last), of one proc and/or containing ``search``."""
    sql = "SELECT ts_us, proc, label, stream, line FROM logs WHERE 1=1"
    args: list[Any] = []
    if proc:
        sql += " AND proc = ?"
        args.append(proc)
    if search:
        sql += " AND instr(line, ?) > 0"
        args.append(search)
    sql += " ORDER BY ts_us DESC, rowid DESC LIMIT ?"
    args.append(limit)
    rows = _dicts(db.execute(sql, args))
    rows.reverse()
    return rows


def throughput(db: sqlite3.Connection, window_s: int = 60) -> dict[str, Any]:
    """Calls handled per second per mesh over the last ``window_s`` seconds recorded (from
    the ``throughput`` table the writer keeps; summed from ``call_counts`` in a database
    written before that table existed)."""
    try:
        newest = db.execute("SELECT max(s) FROM throughput").fetchone()[0] or 0
        rows = db.execute("SELECT mesh, s, n FROM throughput WHERE s > ? ORDER BY s",
                          (newest - window_s,)).fetchall()
    except sqlite3.OperationalError:  # no such table: an older file
        newest_us = db.execute("SELECT max(ts_us) FROM call_counts").fetchone()[0] or 0
        newest = newest_us // 1_000_000
        rows = db.execute(
            "SELECT mesh, ts_us / 1000000 AS s, sum(n) FROM call_counts WHERE ts_us >= ? "
            "GROUP BY mesh, s ORDER BY s", ((newest - window_s + 1) * 1_000_000,)).fetchall()
    series: dict[str, dict[int, int]] = {}
    for mesh, second, n in rows:
        series.setdefault(mesh, {})[int(second)] = int(n)
    names = dict(db.execute("SELECT DISTINCT mesh, name FROM actors").fetchall())
    seconds = list(range(newest - window_s + 1, newest + 1)) if newest else []
    return {"seconds": seconds, "meshes": [
        {"mesh": mesh, "name": names.get(mesh, mesh),
         "per_second": [per.get(s, 0) for s in seconds]} for mesh, per in series.items()]}
