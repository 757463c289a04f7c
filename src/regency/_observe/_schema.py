"""The event store's tables: one SQLite file per job (see docs/observability.md).

Times are integer microseconds since the epoch (columns ending in ``_us``). A *proc* is named
by its address (``unix:@regency-<job>-<mesh>-<rank>``; the controller's is its root address),
an *actor* by its actor id (``<mesh uid>{coords}``; the client is ``root``). Every table but
``procs`` and ``actors`` is append-only; those two hold the current state of each proc and
actor (its latest sample included), kept by the one writer from the events it appends;
``throughput`` sums ``call_counts`` per mesh and second as they are written (the dashboard's
plot reads it instead of aggregating ``call_counts``).
"""

from __future__ import annotations

__all__ = ["COLUMNS", "SCHEMA", "TABLES"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS job (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS events (
    ts_us INTEGER NOT NULL, kind TEXT NOT NULL, proc TEXT, actor TEXT, mesh TEXT,
    summary TEXT, detail TEXT);
CREATE TABLE IF NOT EXISTS calls (
    start_us INTEGER NOT NULL, end_us INTEGER NOT NULL, proc TEXT, actor TEXT,
    caller TEXT, mesh TEXT, endpoint TEXT, bytes INTEGER, ok INTEGER);
CREATE TABLE IF NOT EXISTS call_counts (
    ts_us INTEGER NOT NULL, proc TEXT, actor TEXT, mesh TEXT, endpoint TEXT,
    n INTEGER, recorded INTEGER);
CREATE TABLE IF NOT EXISTS logs (
    ts_us INTEGER NOT NULL, proc TEXT, label TEXT, stream TEXT, line TEXT);
CREATE TABLE IF NOT EXISTS spans (
    start_us INTEGER NOT NULL, end_us INTEGER NOT NULL, proc TEXT, actor TEXT, name TEXT,
    thread INTEGER);
CREATE TABLE IF NOT EXISTS metrics (
    ts_us INTEGER NOT NULL, proc TEXT, name TEXT, kind TEXT, value REAL, count INTEGER,
    attributes TEXT);
CREATE TABLE IF NOT EXISTS procs (
    proc TEXT PRIMARY KEY, mesh TEXT, mesh_name TEXT, rank INTEGER, host TEXT, pid INTEGER,
    state TEXT, started_us INTEGER, ended_us INTEGER, cause TEXT, cpu REAL, rss INTEGER,
    sampled_us INTEGER);
CREATE TABLE IF NOT EXISTS actors (
    actor TEXT PRIMARY KEY, mesh TEXT, name TEXT, class TEXT, rank TEXT, proc TEXT,
    state TEXT, started_us INTEGER, ended_us INTEGER, failure TEXT, queue INTEGER,
    handled INTEGER, rate REAL, sampled_us INTEGER);
CREATE TABLE IF NOT EXISTS throughput (
    s INTEGER NOT NULL, mesh TEXT NOT NULL, n INTEGER, PRIMARY KEY (s, mesh));
CREATE INDEX IF NOT EXISTS calls_start ON calls (start_us);
CREATE INDEX IF NOT EXISTS spans_start ON spans (start_us);
CREATE INDEX IF NOT EXISTS logs_proc ON logs (proc, ts_us);
CREATE INDEX IF NOT EXISTS counts_ts ON call_counts (ts_us);
CREATE INDEX IF NOT EXISTS events_ts ON events (ts_us);
CREATE INDEX IF NOT EXISTS events_kind ON events (kind, ts_us);
CREATE INDEX IF NOT EXISTS logs_ts ON logs (ts_us);
CREATE INDEX IF NOT EXISTS metrics_ts ON metrics (ts_us);
"""

#: the columns of each append-only table, in insert order (rows travel as tuples)
COLUMNS: dict[str, tuple[str, ...]] = {
    "events": ("ts_us", "kind", "proc", "actor", "mesh", "summary", "detail"),
    "calls": ("start_us", "end_us", "proc", "actor", "caller", "mesh", "endpoint", "bytes",
              "ok"),
    "call_counts": ("ts_us", "proc", "actor", "mesh", "endpoint", "n", "recorded"),
    "logs": ("ts_us", "proc", "label", "stream", "line"),
    "spans": ("start_us", "end_us", "proc", "actor", "name", "thread"),
    "metrics": ("ts_us", "proc", "name", "kind", "value", "count", "attributes"),
}

TABLES = (*COLUMNS, "procs", "actors", "throughput", "job")
