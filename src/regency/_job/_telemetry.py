"""A job's telemetry and admin components: Monarch's names over regency's observability.

Monarch's ``job.enable_telemetry()`` starts a sidecar with a query engine and a dashboard;
``job.enable_admin()`` starts a mesh admin HTTP server. regency already has both in one
piece (``docs/observability.md``): the job's event store (one SQLite file written by the
controller, rows sent by every proc) and its JSON HTTP API with the web dashboard. So:

* ``enable_telemetry(TelemetryConfig(...))`` turns recording on (config ``observe``) for the
  controller and every proc spawned after; ``include_dashboard`` serves the dashboard on
  ``dashboard_port`` (a free port when that one is taken); ``retention_secs`` is the store's
  retention policy (config ``observe_retention_secs``: calls, logs, spans and metrics older
  than that are deleted); ``snapshot_interval_secs`` is how often each process samples its
  procs and actors (CPU, memory, queues).
* ``enable_admin(MeshAdminConfig(admin_addr))`` serves the JSON API (and dashboard) at
  ``admin_addr``; ``job.admin_url`` then names it.
* ``job.telemetry_query_client()`` runs SQL over the store; ``job.profile()`` records a window
  and hands its Chrome trace to ``on_trace_ready``.

Both must be enabled before the first regency call of the process (the runtime reads the
configuration when it starts); ``state()`` says so otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["JobProfile", "MeshAdminConfig", "TelemetryConfig", "TelemetryQueryClient",
           "store_path"]

log = logging.getLogger("regency.job")

@dataclass
class TelemetryConfig:
    """What ``job.enable_telemetry()`` starts with the job's next ``state()``.

    Args:
        retention_secs: rows of calls, logs, spans and metrics older than this are deleted
            from the job's store (config ``observe_retention_secs``); 0 keeps everything.
        include_dashboard: serve the web dashboard and its JSON API from the controller.
        dashboard_port: the port it listens on (loopback); a free one if it is taken.
        snapshot_interval_secs: how often every process samples its procs and actors into
            the store (CPU, memory, queue lengths); 0 samples only when a process ends.
    """

    retention_secs: int = 3600
    include_dashboard: bool = False
    dashboard_port: int = 8265
    snapshot_interval_secs: float = 30.0


@dataclass
class MeshAdminConfig:
    """What ``job.enable_admin()`` starts: regency's JSON HTTP API (and dashboard).

    Args:
        admin_addr: ``host:port`` to listen on (default: the config key ``dashboard_addr``,
            ``127.0.0.1:0``). Every ``/api/v1/`` URL but ``health`` needs the job's token.
    """

    admin_addr: str | None = None


def _free_or_zero(port: int) -> int:
    """``port`` when it can be bound on loopback now, else 0 (any free port)."""
    if port == 0:
        return 0
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            log.warning("telemetry: dashboard port %d is taken; using a free port", port)
            return 0
    return port


def component_config(telemetry: TelemetryConfig | None,
                     admin: MeshAdminConfig | None) -> dict[str, Any]:
    """The configuration values the declared components need."""
    values: dict[str, Any] = {"observe": True}
    if telemetry is not None:
        values["observe_sample_interval"] = float(telemetry.snapshot_interval_secs)
        values["observe_retention_secs"] = float(telemetry.retention_secs)
        if telemetry.include_dashboard:
            values["dashboard"] = True
            values["dashboard_addr"] = f"127.0.0.1:{_free_or_zero(telemetry.dashboard_port)}"
    if admin is not None:
        values["dashboard"] = True
        if admin.admin_addr:
            values["dashboard_addr"] = admin.admin_addr
    return values


def configure_for(telemetry: TelemetryConfig | None, admin: MeshAdminConfig | None) -> None:
    """Set the configuration the components need, before the runtime starts.

    Raises:
        RuntimeError: regency already runs in this process without recording.
    """
    from .. import config
    from .._runtime import _current

    values = component_config(telemetry, admin)
    rt = _current.get()
    if rt is not None:
        if getattr(rt, "observer", None) is None or (
                values.get("dashboard") and getattr(rt.observer, "server", None) is None):
            raise RuntimeError(
                "enable_telemetry()/enable_admin() must come before the first regency call "
                "of this process (the runtime already runs without them): call job.state() "
                "first, or set REGENCY_OBSERVE=1 / REGENCY_DASHBOARD=1")
        return
    config.configure(**values)


def store_path() -> str | None:
    """The path of this process's job store (None when it does not record)."""
    from .._runtime import _current

    rt = _current.get()
    store = getattr(getattr(rt, "observer", None), "store", None)
    return None if store is None else str(store.path)


def admin_info() -> dict[str, str] | None:
    """The URL and token of the API this controller serves (None when it serves none)."""
    from .._runtime import _current

    rt = _current.get()
    server = getattr(getattr(rt, "observer", None), "server", None)
    if server is None:
        return None
    return {"url": str(server.url), "token": str(server.token)}


class TelemetryQueryClient:
    """SQL over a job's event store (read-only): Monarch's telemetry query client.

    ``query("SELECT endpoint, count(*) AS n FROM calls GROUP BY endpoint")`` returns
    ``{"columns": [...], "rows": [{"endpoint": ..., "n": ...}, ...]}``. Tables and columns:
    ``docs/observability.md``. Any process can hold one: it only needs the database file.
    """

    def __init__(self, db_path: str, timeout: float = 10.0) -> None:
        if not os.path.exists(db_path):
            raise RuntimeError(f"the job's telemetry store {db_path} does not exist")
        self.db_path = db_path
        self.timeout = timeout

    def query(self, sql: str, timeout: float | None = None) -> dict[str, Any]:
        """Run one SQL statement; its columns and rows (each row a dict).

        Raises:
            RuntimeError: the statement failed (the text has SQLite's reason).
        """
        from .._observe._store import connect_readonly

        db = connect_readonly(self.db_path)
        db.execute(f"PRAGMA busy_timeout = {int(1000 * (timeout or self.timeout))}")
        try:
            cur = db.execute(sql)
            cols = [d[0] for d in cur.description or ()]
            rows = [dict(zip(cols, tuple(r), strict=True)) for r in cur.fetchall()]
        except sqlite3.Error as exc:
            raise RuntimeError(f"telemetry query failed: {exc} (SQL: {sql})") from None
        finally:
            db.close()
        return {"columns": cols, "rows": rows}

    def __repr__(self) -> str:
        return f"<TelemetryQueryClient {self.db_path}>"


class JobProfile:
    """A profiled window of a job (``with job.profile() as prof: ...``).

    On exit the calls and spans recorded in the window (every proc's) are read from the
    job's store as a Chrome trace (``prof.trace``, ``prof.export_chrome_trace(path)``) and
    ``on_trace_ready(prof)`` is called.
    """

    def __init__(self, db_path: str, on_trace_ready: Callable[[JobProfile], object] | None
                 ) -> None:
        self.db_path = db_path
        self.on_trace_ready = on_trace_ready
        self.start_us = 0
        self.end_us = 0
        self.trace: dict[str, Any] = {}

    def __enter__(self) -> JobProfile:
        self.start_us = int(time.time() * 1e6)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """End the window, read its trace and call ``on_trace_ready``."""
        from .._observe._store import connect_readonly
        from .._observe._trace import trace_events
        from .._runtime import _current

        self.end_us = int(time.time() * 1e6)
        rt = _current.get()
        observer = getattr(rt, "observer", None)
        if observer is not None and observer.store is not None:
            _flush_everything(rt, observer)
        db = connect_readonly(self.db_path)
        try:
            self.trace = trace_events(db, self.start_us, self.end_us)
        finally:
            db.close()
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    @property
    def events(self) -> list[dict[str, Any]]:
        """The trace's events (Chrome trace format)."""
        return list(self.trace.get("traceEvents", []))

    def export_chrome_trace(self, path: str) -> None:
        """Write the trace as a Chrome/Perfetto JSON file."""
        with open(path, "w") as f:
            json.dump(self.trace, f)


def _flush_everything(rt: Any, observer: Any, timeout: float = 10.0) -> None:
    """Have every running proc of the job send what it recorded, and wait until it is in
    the store (each proc answers with a marker row after its rows; a proc that does not
    answer within ``timeout`` only shortens the trace)."""
    import asyncio
    import uuid

    from .._debug._stacks import job_procs
    from .._observe._messages import ObserveFlush
    from .._observe._store import connect_readonly

    token = uuid.uuid4().hex
    store = observer.store
    store.flushed(timeout=timeout)
    db = connect_readonly(store.path)
    try:
        procs = sorted({p[2] for p in job_procs(rt)})  # every live proc this process spawned
        for proc in procs:
            rt.send_sys(proc, ObserveFlush(token))

        async def flush_here() -> None:
            observer.flush()

        asyncio.run_coroutine_threadsafe(flush_here(), rt.loop).result(timeout=timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            store.flushed(timeout=timeout)
            answered = db.execute("SELECT count(*) FROM job WHERE key LIKE ?",
                                  (f"flushed:{token}:%",)).fetchone()[0]
            alive = sum(1 for p in procs if p not in rt.dead_addrs)
            if answered >= alive:
                break
            time.sleep(0.02)
        else:
            log.warning("profile: not every proc sent its records within %ss", timeout)
    except Exception:  # noqa: BLE001 - a missed flush only shortens the trace
        log.debug("telemetry: could not flush before reading the trace", exc_info=True)
    finally:
        db.close()
    store.put([("job_forget", (f"flushed:{token}:%",))])
    store.flushed(timeout=timeout)
