"""Observability: the job's event store, its HTTP API, traces, ``regency top`` and the dashboard.

The runtime calls three hooks, each only when the config key ``observe`` is on:
:func:`start_controller` when the controller's runtime starts, :func:`start_proc` when a proc
is listening, :func:`stop` when either ends. Everything else hangs off ``Runtime.observer``
(see ``_observer.py``). The data model is documented in ``docs/observability.md``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .. import config

__all__ = ["enabled", "start_controller", "start_proc", "stop"]


def enabled() -> bool:
    """Whether this process records (``observe``, or ``dashboard`` which needs it)."""
    return bool(config.get("observe") or config.get("dashboard"))


def start_controller(rt: Any) -> None:
    """Open the job's store, record this controller, and serve the API if asked (loop up)."""
    from ._jobs import job_dir
    from ._messages import ObserveBatch
    from ._observer import Observer
    from ._store import Store

    path = os.path.join(job_dir(), f"{rt.job}.db")
    store = Store(path)
    store.put([("job", ("job", rt.job)), ("job", ("controller_pid", str(os.getpid()))),
               ("job", ("argv", " ".join(sys.argv)))])
    observer = Observer(rt, store.put)
    observer.store = store
    rt.handle(ObserveBatch, lambda msg: store.put(msg.rows))
    rt.observer = observer
    rt.call_soon(observer.start, "root", "controller", 0)
    if config.get("dashboard"):
        from ._server import serve_job, set_stack_provider

        set_stack_provider(lambda addr: _stacks_of(rt, addr))
        observer.server = serve_job(path)


def _stacks_of(rt: Any, addr: str) -> str:
    """One proc's Python stacks as text, for ``/api/v1/stack`` (``regency top``'s ``s`` key)."""
    from .._debug._stacks import collect, job_procs

    procs = [p for p in job_procs(rt) if p[2] == addr]
    if not procs:
        return f"no live proc at {addr} in this job"
    return str(collect(rt, procs))


def start_proc(rt: Any, spec: dict[str, Any]) -> None:
    """Record this proc and send what it records to the controller (loop thread)."""
    from ._messages import ObserveFlush
    from ._observer import Observer, rows_sink_for_proc

    observer = Observer(rt, rows_sink_for_proc(rt))
    rt.observer = observer
    rt.handle(ObserveFlush, lambda msg: _flush_on_request(rt, msg.token))
    observer.start(spec["mesh_uid"], spec.get("mesh_name", ""), int(spec["rank"]))


def _flush_on_request(rt: Any, token: str) -> None:
    """Send everything recorded so far, then the marker saying so (loop thread)."""
    from ._recorder import now_us

    observer = getattr(rt, "observer", None)
    if observer is None:
        return
    observer.flush()
    rows_sink = observer.rec.sink
    rows_sink([("job", (f"flushed:{token}:{rt.address}", str(now_us())))])


def stop(rt: Any) -> None:
    """Flush what is left; in the controller also stop the API and close the store."""
    observer = getattr(rt, "observer", None)
    if observer is None:
        return
    observer.close()
    server = getattr(observer, "server", None)
    if server is not None:
        server.close()
    store = getattr(observer, "store", None)
    if store is not None:
        store.close()
    rt.observer = None
