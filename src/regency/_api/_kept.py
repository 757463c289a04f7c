"""Procs that outlive their controller: what a worker and a proc do with a detached mesh.

A controller detaches a proc mesh on worker hosts (``ProcMesh.detach``): each worker keeps
the mesh's procs, and what they started, when that controller ends, releases the worker or
stops renewing its lease, and keeps the controller's record of the mesh (opaque bytes) for
the next controller. That one lists the kept meshes (``ListKept``), takes one over
(``Reattach``: the worker's procs are its own from then on, and end with it unless it
detaches them again) and tells each proc who its root and owner are now (``Adopt``).

The controller's side, which builds the books and mesh objects, is ``_reattach``.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .._runtime._host_agent import HostAgent, ProcRecord
from .._runtime._runtime import Runtime
from .._wire import _messages as m
from ..errors import TransportError
from ._state import api_state

__all__ = ["KeptMeshes", "on_adopt"]

RECENT_EXITS = 1024  # exit reports a worker remembers, for meshes detached after a death
_KEPT_LINES, _LINE_CHARS = 5, 300  # of their last lines


@dataclass(eq=False)
class Kept:
    """A mesh detached on this worker: its procs here and its controller's record."""

    name: str
    controller: str  # the one that detached it (whose terminal shows its output)
    addrs: set[str]
    parts: dict[str, bytes] = field(default_factory=dict)  # the record, by part
    ended: dict[str, m.ProcExited] = field(default_factory=dict)  # addr -> its exit report


class KeptMeshes:
    """The worker's book of detached meshes, and its answers to ``KeepProcs``, ``ListKept``
    and ``Reattach`` (only from the controller it serves: ``controller()``)."""

    def __init__(self, rt: Runtime, agent: HostAgent, controller: Callable[[], str | None]
                 ) -> None:
        self.rt = rt
        self.agent = agent
        self.controller = controller
        self.meshes: dict[str, Kept] = {}  # mesh uid -> what is kept
        self.recent: collections.OrderedDict[str, m.ProcExited] = collections.OrderedDict()
        rt.handle(m.KeepProcs, self._on_keep)
        rt.handle(m.ListKept, self._on_list)
        rt.handle(m.Reattach, self._on_reattach)
        agent.exit_reports.append(self._on_exit_report)
        agent.muted = self._muted

    def _refused(self, port: m.PortRef, who: str) -> bool:
        """Answer a request of a controller this worker does not serve with an error."""
        if who == self.controller():
            return False
        self.rt.send_reply(port, None, m.RAW_ERROR, TransportError(
            f"worker {self.rt.address} serves controller {self.controller()}, not {who}"))
        return True

    def _on_keep(self, msg: m.KeepProcs) -> None:
        if self._refused(msg.port, msg.controller):
            return
        if not msg.addrs:  # its controller stopped the whole mesh: nothing to keep
            self.meshes.pop(msg.mesh_uid, None)
            self.rt.send_reply(msg.port, None, m.OK, None)
            return
        kept = self.meshes.get(msg.mesh_uid)
        if kept is None:
            kept = self.meshes[msg.mesh_uid] = Kept(msg.name, msg.controller, set())
        kept.parts.update(msg.parts)  # the actor meshes spawned since, a respawn's addresses
        for key in [k for k, v in msg.parts.items() if not v]:
            del kept.parts[key]  # an actor mesh stopped since
        kept.addrs = set(msg.addrs)  # the mesh's procs here now (a respawned rank's new one)
        kept.ended = {a: self._report_of(a, msg.mesh_uid, kept) for a in kept.addrs
                      if a not in self.agent.procs}
        self.rt.send_reply(msg.port, None, m.OK, None)

    def _report_of(self, addr: str, uid: str, kept: Kept) -> m.ProcExited:
        """Why the proc ``addr``, no longer here, ended, as its exit report said."""
        report = kept.ended.get(addr) or self.recent.get(addr)
        if report is not None:
            return report
        rank = addr.rsplit("-", 1)[-1]
        return m.ProcExited(addr, None, "had ended before its mesh was detached", False, uid,
                            int(rank) if rank.isdigit() else 0, self.rt.hostname, [])

    def _on_list(self, msg: m.ListKept) -> None:
        if self._refused(msg.port, msg.controller):
            return
        listing = []
        for uid, kept in self.meshes.items():
            live = sorted(a for a in kept.addrs if a in self.agent.procs)
            failed = sorted(a for a, r in kept.ended.items() if not r.expected)
            listing.append({"uid": uid, "name": kept.name, "parts": kept.parts,
                            "live": live, "failed": failed})
        self.rt.send_reply(msg.port, None, m.OK, listing)

    def _on_reattach(self, msg: m.Reattach) -> None:
        if self._refused(msg.port, msg.controller):
            return
        kept = self.meshes.pop(msg.mesh_uid, None)
        if kept is None:
            self.rt.send_reply(msg.port, None, m.RAW_ERROR, ValueError(
                f"worker {self.rt.address} keeps no proc mesh {msg.mesh_uid} (another "
                "controller took it over, or its procs ended with this worker)"))
            return
        for rec in list(self.agent.procs.values()):
            if rec.addr in kept.addrs:
                rec.owner = msg.controller  # its exit is told to the new owner
            if self._kept_by(rec, kept) is not None:
                self._output_read(rec, msg.controller)
        self.rt.send_reply(msg.port, None, m.OK, None)
        for report in kept.ended.values():  # after the answer: the owner has its books
            self.rt.send_sys(msg.controller, report)

    def _output_read(self, rec: ProcRecord, controller: str) -> None:
        """Tell the new controller how much of ``rec``'s output was read: what it printed
        meanwhile went to its log file only, and the controller must not wait for it."""
        if not rec.marked:
            return
        for fd, kind in zip(rec.pipes_at_start, ("stdout", "stderr")):
            self.rt.send_sys(controller, m.ProcOutput(rec.label, kind, [], rec.addr,
                                                      rec.read.get(fd, 0)))

    def _on_exit_report(self, rec: ProcRecord, report: m.ProcExited) -> None:
        if not report.expected and self.controller() is None:
            report = replace(report, cause=f"{report.cause} while no controller was attached")
        kept = self.meshes.get(rec.mesh_uid)
        if kept is not None and rec.addr in kept.addrs:
            kept.ended[rec.addr] = report  # the next controller hears of it
        lines = [line[:_LINE_CHARS] for line in report.last_lines[-_KEPT_LINES:]]
        self.recent[rec.addr] = replace(report, last_lines=lines)  # kept small: most are
        while len(self.recent) > RECENT_EXITS:  # never asked for
            self.recent.popitem(last=False)

    def _muted(self, rec: ProcRecord) -> bool:
        """Whether ``rec``'s output stays in its log file: a kept proc (or one spawned below
        it) whose controller is not the one attached (that one did not take it over)."""
        here = self.controller()
        return any(kept.controller != here and self._kept_by(rec, kept) is not None
                   for kept in self.meshes.values())

    def _kept_by(self, rec: ProcRecord, kept: Kept) -> str | None:
        """The proc of ``kept`` that ``rec`` is, or was spawned below (None: neither)."""
        addr, seen = rec.addr, 0
        while seen < 64:  # an owner chain is short; a cycle is not followed for ever
            if addr in kept.addrs:
                return addr
            above = self.agent.procs.get(addr)
            if above is None:
                return None
            addr, seen = above.owner, seen + 1
        return None

    def spared(self) -> set[str]:
        """The procs that stay when the controller goes: those kept, and those they own."""
        keep = {a for kept in self.meshes.values() for a in kept.addrs}
        grew = True
        while grew:
            more = {r.addr for r in self.agent.procs.values() if r.owner in keep}
            grew = not more <= keep
            keep |= more
        return keep & set(self.agent.procs)


def on_adopt(rt: Runtime, msg: m.Adopt) -> None:
    """In a proc of a reattached mesh (or one such a proc spawned): the new controller is
    this proc's root, and owns the actor meshes the old one owned here. Answers with the
    state of each actor mesh here; a failure the old controller may never have heard of is
    sent to the new one."""
    old = set(msg.old)
    rt.root = msg.root
    rt.root_addresses = {msg.root, *msg.root_addresses}
    fence = rt.output_fence
    controllers = getattr(fence, "controllers", None)
    if isinstance(controllers, set):  # a worker's proc marks its output for its controller
        controllers.difference_update(old)
        controllers.update(rt.root_addresses, {msg.owner})
    states: dict[str, list[str]] = {"live": [], "failed": [], "stopped": []}
    for uid, cell in rt.cells.items():
        states[_adopt_cell(rt, cell, msg, old)].append(uid)
    _pass_on(rt, msg)
    rt.send_reply(msg.port, None, m.OK, states)


def _adopt_cell(rt: Runtime, cell: Any, msg: m.Adopt, old: set[str]) -> str:
    """Make the new controller the owner of ``cell``'s actor if the old one owned it;
    returns its state: ``live``, ``failed`` (the failure is sent again) or ``stopped``."""
    behavior = getattr(cell, "behavior", None)
    if behavior is None:
        return "stopped"  # a tombstone: calls to it fail at once
    if getattr(behavior, "owner", None) not in old:
        return "live"  # an actor's own mesh: its owner is still there
    behavior.owner = msg.owner
    failure = getattr(behavior, "failure", None)
    if failure is None:
        return "live"
    rt.send_sys(msg.owner, m.ActorFailed(behavior.uid, behavior.g, failure,
                                         behavior.owner_uid))
    return "failed"


def _pass_on(rt: Runtime, msg: m.Adopt) -> None:
    """The procs this proc's actors spawned take the new root too (no answer awaited)."""
    for record in api_state(rt).proc_meshes.values():
        for addr in record.addr_list:
            port_id = rt.open_port(lambda reply, frame: None)
            rt.send_sys(addr, replace(msg, port=(rt.contact, port_id)))
            rt.loop.call_later(30.0, rt.close_port, port_id)
