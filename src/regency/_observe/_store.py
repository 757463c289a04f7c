"""The job's event store: one SQLite file, one writer thread, any number of readers.

Rows arrive as ``(table, tuple)`` pairs in batches (from this process's recorder and from
procs' ``observe_batch`` messages) through :meth:`Store.put`, which only queues them: the
writer thread inserts each batch in one transaction. Besides the append-only tables of
``_schema.COLUMNS`` a row may name an *update* (``proc_up``, ``proc_end``, ``proc_sample``,
``actor_up``, ``actor_end``, ``actor_sample``) that keeps the ``procs`` and ``actors`` tables
current. The file is in WAL mode, so ``regency query``, the HTTP API and ``regency top`` read
it while the job writes it.

The writer also keeps ``throughput`` (calls per mesh per second, summed from ``call_counts``
rows as they are written) and applies the retention policy (``_retention.py``) between
batches.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Iterable
from typing import Any

from ._recorder import now_us
from ._retention import Retention
from ._schema import COLUMNS, SCHEMA

__all__ = ["Row", "Store", "connect_readonly", "run_query"]

log = logging.getLogger("regency.observe")

Row = tuple[str, tuple[Any, ...]]

_UPDATES: dict[str, str] = {
    "proc_up": "INSERT INTO procs (proc, mesh, mesh_name, rank, host, pid, state, started_us) "
               "VALUES (?, ?, ?, ?, ?, ?, 'running', ?) ON CONFLICT(proc) DO UPDATE SET "
               "mesh=excluded.mesh, mesh_name=excluded.mesh_name, rank=excluded.rank, "
               "host=excluded.host, pid=excluded.pid, started_us=excluded.started_us",
    "proc_end": "INSERT INTO procs (proc, ended_us, state, cause) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(proc) DO UPDATE SET ended_us=excluded.ended_us, "
                "state=excluded.state, cause=excluded.cause",
    # a stop event for each actor of a proc that was stopped, before they are marked ended
    "proc_actors_stopped": "INSERT INTO events (ts_us, kind, proc, actor, mesh, summary) "
                           "SELECT ?, 'stop', proc, actor, mesh, ? FROM actors WHERE proc=? "
                           "AND state='running'",
    "proc_actors_end": "UPDATE actors SET ended_us=?, state=? WHERE proc=? AND "
                       "state='running'",
    "proc_sample": "UPDATE procs SET sampled_us=?, cpu=?, rss=? WHERE proc=?",
    # an actor's end may be written before its start (recorded by its owner elsewhere)
    "actor_up": "INSERT INTO actors (actor, mesh, name, class, rank, proc, state, started_us, "
                "handled, queue, rate) VALUES (?, ?, ?, ?, ?, ?, 'running', ?, 0, 0, 0) "
                "ON CONFLICT(actor) DO UPDATE SET mesh=excluded.mesh, name=excluded.name, "
                "class=excluded.class, rank=excluded.rank, proc=excluded.proc, "
                "started_us=excluded.started_us",
    "actor_end": "INSERT INTO actors (actor, ended_us, state, failure, handled, queue, rate) "
                 "VALUES (?, ?, ?, ?, 0, 0, 0) ON CONFLICT(actor) DO UPDATE SET "
                 "ended_us=excluded.ended_us, state=excluded.state, "
                 "failure=coalesce(excluded.failure, failure)",
    "actor_sample": "UPDATE actors SET sampled_us=?, queue=?, handled=?, rate=? WHERE actor=?",
    "job": "INSERT OR REPLACE INTO job (key, value) VALUES (?, ?)",
    "job_forget": "DELETE FROM job WHERE key LIKE ?",
}
_INSERTS = {
    table: f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    for table, cols in COLUMNS.items()
}
_THROUGHPUT = ("INSERT INTO throughput (s, mesh, n) VALUES (?, ?, ?) ON CONFLICT(s, mesh) "
               "DO UPDATE SET n = n + excluded.n")
_STOP = object()
_SWEEP = object()


def _open(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA)
    return db


class Store:
    """The one writer of a job's database."""

    def __init__(self, path: str, retention: Retention | None = None) -> None:
        self.path = path
        self._db = _open(path)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.written = 0  # rows written so far (tests wait on it through ``flushed``)
        self.trimmed = 0  # rows deleted by the retention policy so far
        self.retention = retention if retention is not None else Retention.from_config()
        self._cond = threading.Condition()
        self._taken = 0
        self._given = 0
        self._sweeps_asked = 0
        self._sweeps_done = 0
        self._sweeping = False
        self._next_sweep = time.monotonic() + self.retention.every_s
        self._thread = threading.Thread(target=self._run, name="regency-observe-store",
                                        daemon=True)
        self._thread.start()

    def put(self, rows: list[Row]) -> None:
        """Queue a batch of rows for the writer (any thread; returns at once)."""
        if rows:
            with self._cond:
                self._given += 1
            self._queue.put(rows)

    def flushed(self, timeout: float = 10.0) -> bool:
        """Wait until every batch queued so far is written."""
        with self._cond:
            target = self._given
            return self._cond.wait_for(lambda: self._taken >= target, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, then stop the writer and close the file."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def trim(self, timeout: float = 10.0) -> bool:
        """Apply the retention policy now, and wait until it is done (tests, tools)."""
        with self._cond:
            self._sweeps_asked += 1
            target = self._sweeps_asked
        self._queue.put(_SWEEP)
        with self._cond:
            return self._cond.wait_for(lambda: self._sweeps_done >= target, timeout)

    def _run(self) -> None:
        while True:
            try:
                batch = self._queue.get(timeout=self._idle_wait())
            except queue.Empty:
                self._trim_step()
                continue
            batches = [batch]
            while batch is not _STOP:  # take what else is waiting: one transaction
                try:
                    batch = self._queue.get_nowait()
                except queue.Empty:
                    break
                batches.append(batch)
            stop = batches[-1] is _STOP
            if any(b is _SWEEP for b in batches):
                self._sweeping = True
            batches = [b for b in batches if b is not _STOP and b is not _SWEEP]
            rows = [r for b in batches for r in b]
            try:
                self._write(rows)
            except Exception:  # a bad row must not stop recording
                log.exception("regency: could not write %d observation rows", len(rows))
            with self._cond:
                self._taken += len(batches)
                self._cond.notify_all()
            if stop:
                self._db.close()
                return
            if self.retention.active and time.monotonic() >= self._next_sweep:
                self._sweeping = True
            if self._sweeping and self._queue.empty():
                self._trim_step()

    def _idle_wait(self) -> float | None:
        """How long the writer may wait for rows before a retention step is due."""
        if self._sweeping:
            return 0.0
        if not self.retention.active:
            return None
        return max(0.0, self._next_sweep - time.monotonic())

    def _trim_step(self) -> None:
        """One batch of the retention sweep; a sweep with nothing left to delete ends."""
        n = 0
        if self.retention.active:
            try:
                n = self.retention.trim_batch(self._db, now_us())
            except sqlite3.Error:
                log.exception("regency: could not trim the observation store")
        self.trimmed += n
        if n == 0:
            self._sweeping = False
            self._next_sweep = time.monotonic() + self.retention.every_s
            with self._cond:
                self._sweeps_done = self._sweeps_asked
                self._cond.notify_all()

    def _write(self, rows: Iterable[Row]) -> None:
        grouped: dict[str, list[tuple[Any, ...]]] = {}
        order: list[str] = []
        for table, values in rows:
            group = grouped.get(table)
            if group is None:
                group = grouped[table] = []
                order.append(table)
            group.append(values)
        db = self._db
        db.execute("BEGIN")
        try:
            for table in _ordered(order):
                sql = _INSERTS.get(table) or _UPDATES.get(table)
                if sql is None:
                    log.warning("regency: unknown observation row kind %r", table)
                    continue
                db.executemany(sql, grouped[table])
                self.written += len(grouped[table])
            if "call_counts" in grouped:
                db.executemany(_THROUGHPUT, _per_second(grouped["call_counts"]))
        finally:
            db.execute("COMMIT")


def _per_second(counts: list[tuple[Any, ...]]) -> list[tuple[int, str, int]]:
    """``call_counts`` rows summed per (second, mesh), for ``throughput``."""
    sums: dict[tuple[int, str], int] = {}
    for ts, _proc, _actor, mesh, _endpoint, n, _recorded in counts:
        key = (int(ts) // 1_000_000, mesh or "")
        sums[key] = sums.get(key, 0) + int(n)
    return [(s, mesh, n) for (s, mesh), n in sums.items()]


def _ordered(kinds: list[str]) -> list[str]:
    """Creations before the updates that need their rows (an up before its sample/end)."""
    rank = {"proc_up": 0, "actor_up": 1, "proc_end": 3, "actor_end": 3,
            "proc_actors_stopped": 3, "proc_actors_end": 4}
    return sorted(kinds, key=lambda k: rank.get(k, 2))


def connect_readonly(path: str) -> sqlite3.Connection:
    """A reader of a job's database (live or finished); never writes."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    db.row_factory = sqlite3.Row
    return db


def run_query(db: sqlite3.Connection, sql: str,
              params: tuple[Any, ...] = ()) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one statement; returns (column names, rows)."""
    cur = db.execute(sql, params)
    cols = [d[0] for d in cur.description or ()]
    return cols, [tuple(r) for r in cur.fetchall()]
