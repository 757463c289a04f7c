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

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .._runtime._host_agent import HostAgent, ProcRecord
from .._runtime._runtime import Runtime
from .._wire import _messages as m
from ..errors import TransportError

__all__ = ["KeptMeshes", "on_adopt"]


@dataclass(eq=False)
class Kept:
    """A mesh detached on this worker: the procs it kept and its controller's record."""

    name: str
    addrs: set[str]
    record: bytes
    exits: list[m.ProcExited] = field(default_factory=list)  # told to no one yet


class KeptMeshes:
    """The worker's book of detached meshes, and its answers to ``KeepProcs``, ``ListKept``
    and ``Reattach`` (only from the controller it serves: ``controller()``)."""

    def __init__(self, rt: Runtime, agent: HostAgent, controller: Callable[[], str | None]
                 ) -> None:
        self.rt = rt
        self.agent = agent
        self.controller = controller
        self.meshes: dict[str, Kept] = {}  # mesh uid -> what is kept
        rt.handle(m.KeepProcs, self._on_keep)
        rt.handle(m.ListKept, self._on_list)
        rt.handle(m.Reattach, self._on_reattach)
        agent.exit_reports.append(self._on_exit_report)

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
        kept = self.meshes.get(msg.mesh_uid)
        if kept is None:
            kept = self.meshes[msg.mesh_uid] = Kept(msg.name, set(), msg.record)
        kept.record = msg.record  # the latest: it names the actor meshes spawned since
        kept.addrs = set(msg.addrs)  # the mesh's procs here now (a respawned rank's new one)
        kept.exits = [e for e in kept.exits if e.addr in kept.addrs]
        self.rt.send_reply(msg.port, None, m.OK, None)

    def _on_list(self, msg: m.ListKept) -> None:
        if self._refused(msg.port, msg.controller):
            return
        listing = []
        for uid, kept in list(self.meshes.items()):
            live = sorted(a for a in kept.addrs if a in self.agent.procs)
            if not live and not kept.exits:  # stopped by its owner: nothing left to adopt
                del self.meshes[uid]
                continue
            listing.append({"uid": uid, "name": kept.name, "record": kept.record,
                            "live": live, "dead": sorted(kept.addrs.difference(live))})
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
        for rec in self.agent.procs.values():
            if rec.addr in kept.addrs:
                rec.owner = msg.controller  # its exit is told to the new owner
        self.rt.send_reply(msg.port, None, m.OK, None)
        for report in kept.exits:  # after the answer: the owner has its books by then
            cause = f"{report.cause} while no controller was attached"
            self.rt.send_sys(msg.controller, replace(report, cause=cause))

    def _on_exit_report(self, rec: ProcRecord, report: m.ProcExited) -> None:
        kept = self.meshes.get(rec.mesh_uid)
        if kept is not None and rec.addr in kept.addrs and not report.expected:
            kept.exits.append(report)  # a failure the next controller must hear of

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
    """In a proc of a reattached mesh: the new controller is this proc's root, and owns the
    actor meshes the old one owned here. Answers with the actor meshes that live here."""
    old = set(msg.old)
    rt.root = msg.root
    rt.root_addresses = {msg.root, *msg.root_addresses}
    fence = rt.output_fence
    controllers = getattr(fence, "controllers", None)
    if isinstance(controllers, set):  # a worker's proc marks its output for its controller
        controllers.difference_update(old)
        controllers.update(rt.root_addresses, {msg.owner})
    for cell in rt.cells.values():
        behavior = getattr(cell, "behavior", None)
        if behavior is not None and getattr(behavior, "owner", None) in old:
            behavior.owner = msg.owner
    rt.send_reply(msg.port, None, m.OK, sorted(rt.cells))
