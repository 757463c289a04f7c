"""The observation service of one process: the hooks the runtime calls when recording is on.

A runtime with ``observer`` set (``Runtime.observer``) shows it every system message it
handles (:meth:`Observer.system`), every actor spawned here (:meth:`Observer.actor_spawned`)
and, in a process with a host agent, every line its procs print (:meth:`Observer.lines`).
The observer turns those into rows for its :class:`Recorder`, which a timer on the loop
flushes. With ``observer`` None (recording off) the runtime does none of this.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import asdict, is_dataclass
from typing import Any

import psutil

from .. import config
from ._calls import timed_handle
from ._recorder import FLUSH_S, Recorder, now_us, set_active
from ._store import Row

__all__ = ["Observer"]

log = logging.getLogger("regency.observe")


def _self_sampler() -> Any:
    me = psutil.Process()
    me.cpu_percent(None)

    def sample() -> tuple[float, int]:
        try:
            return me.cpu_percent(None), int(me.memory_info().rss)
        except psutil.Error:
            return 0.0, 0

    return sample


class Observer:
    """Recording in one process (the controller or a proc)."""

    def __init__(self, rt: Any, sink: Any) -> None:
        self.rt = rt
        self.rec = Recorder(rt.address, sink, int(config.get("observe_call_rate")),
                            _self_sampler())
        self._timer: Any = None
        self.store: Any = None  # the controller's: the job's Store
        self.server: Any = None  # the controller's: the HTTP API, when served
        set_active(self.rec)

    # -- life -----------------------------------------------------------------------------------
    def start(self, mesh: str, mesh_name: str, rank: int) -> None:
        """Record this process as up and start flushing (loop thread)."""
        rt = self.rt
        self.rec.add("proc_up", (rt.address, mesh, mesh_name, rank, socket.gethostname(),
                                 os.getpid(), now_us()))
        self.rec.event("proc_up", None, mesh, f"{rt.role} pid {os.getpid()} up")
        self._schedule()

    def _schedule(self) -> None:
        self._timer = self.rt.loop.call_later(FLUSH_S, self._tick)

    def _tick(self) -> None:
        try:
            self.flush()
        except Exception:  # recording must never take the process down
            log.exception("regency: observation flush failed")
        if not self.rec.closed:
            self._schedule()

    def flush(self, sample: bool = False) -> None:
        """Send what is recorded now (loop thread, or at the end)."""
        cells = self.rt.cells
        for tap in self.rec.taps.values():
            if tap.cell is None:
                tap.cell = cells.get(tap.mesh)
        self.rec.flush(sample)

    def close(self) -> None:
        """A last flush; nothing is recorded after it."""
        if self.rec.closed:
            return
        if self._timer is not None:
            try:
                self._timer.cancel()
            except RuntimeError:  # pragma: no cover - the loop is already closed
                pass
        if self.rt.role == "controller":
            self.rec.add("proc_end", (self.rt.address, now_us(), "stopped", "the job ended"))
        self.flush(sample=True)
        self.rec.closed = True

    # -- hooks ----------------------------------------------------------------------------------
    def actor_spawned(self, behavior: Any) -> None:
        """An actor is being made here: record it and time its calls."""
        inst = behavior.instance
        rank = str(dict(behavior.rank))
        self.rec.add("actor_up", (inst.actor_id, behavior.uid, inst.name, behavior.class_name,
                                  rank, self.rt.address, now_us()))
        self.rec.event("spawn", inst.actor_id, behavior.uid,
                       f"{behavior.class_name} {inst.name}{rank}")
        tap = self.rec.tap(inst.actor_id, behavior.uid)
        behavior.handle = timed_handle(behavior.handle, tap, self.rec, behavior.is_async,
                                       lambda: behavior.failure is not None)

    def lines(self, proc: str, label: str, stream: str, lines: list[str]) -> None:
        """Lines a proc of this host printed."""
        ts = now_us()
        add = self.rec.add
        for line in lines:
            add("logs", (ts, proc, label, stream, line))

    def system(self, kind: str, msg: Any) -> None:
        """A system message this runtime is about to handle."""
        fn = _SYSTEM.get(kind)
        if fn is not None:
            try:
                fn(self, msg)
            except Exception:
                log.exception("regency: could not record a %r message", kind)

    def _actor_failed(self, msg: Any) -> None:
        failure = msg.failure
        coords = failure.coords[0] if getattr(failure, "coords", None) else {}
        actor = f"{msg.uid}{coords}"
        detail = _failure_detail(failure)
        self.rec.event("failure", actor, msg.uid, str(getattr(failure, "cause", "")), detail)
        self.rec.add("actor_end", (actor, now_us(), "failed", detail.get("report")))

    def _proc_exited(self, msg: Any) -> None:
        state = "stopped" if msg.expected else "failed"
        detail = {"cause": msg.cause, "pid": msg.pid, "host": msg.host, "rank": msg.rank,
                  "endpoint": msg.endpoint, "last_lines": msg.last_lines}
        kind = "proc_exit" if msg.expected else "failure"
        self.rec.event(kind, None, msg.mesh_uid, f"proc {msg.cause}", detail, proc=msg.addr)
        self.rec.add("proc_end", (msg.addr, now_us(), state, msg.cause))
        if msg.expected:  # its actors were stopped with it (``stop`` events, as a mesh's)
            self.rec.add("proc_actors_stopped", (now_us(), f"proc {msg.cause}", msg.addr))
        self.rec.add("proc_actors_end", (now_us(), state, msg.addr))

    def _stop_actor(self, msg: Any) -> None:
        for tap in list(self.rec.taps.values()):
            if tap.mesh == msg.uid:
                self.rec.event("stop", tap.actor, msg.uid, str(msg.reason))
                self.rec.add("actor_end", (tap.actor, now_us(), "stopped", None))

    def _proc_output(self, msg: Any) -> None:  # lines of a proc on a worker host
        self.lines(msg.proc, msg.label, msg.stream, msg.lines)


_SYSTEM = {
    "actor_failed": Observer._actor_failed,
    "proc_exited": Observer._proc_exited,
    "stop_actor": Observer._stop_actor,
    "proc_output": Observer._proc_output,
}


def _failure_detail(failure: Any) -> dict[str, Any]:
    detail: dict[str, Any] = (asdict(failure) if is_dataclass(failure)
                              and not isinstance(failure, type) else {})
    report = getattr(failure, "report", None)
    if callable(report):
        try:
            detail["report"] = report()
        except Exception:  # noqa: BLE001 - the fields are there anyway
            pass
    return detail


def rows_sink_for_proc(rt: Any) -> Any:
    """The sink of a proc: a batch message to the controller."""
    from ._messages import ObserveBatch

    def send(rows: list[Row]) -> None:
        if rt.root:
            rt.send_sys(rt.root, ObserveBatch(rows))

    return send
