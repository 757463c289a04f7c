"""The supervisor of one runtime: feeds the pure ``SupervisionState`` and carries out its actions.

Events come from the runtime (a mesh spawned or stopped, an actor's failure report, a proc's
exit status from its host agent, a broken connection, a timer, ``__supervise__`` or the root
hook returning); actions go back out (fail these calls, start a timer, run ``__supervise__``,
run the root hook, fail the owner actor, fail fast). Actions run on the loop thread.

The machine is the one judge of whether a new call or spawn may go. After each batch of
events the supervisor publishes the machine's :class:`~regency._supervision.Verdicts` as
``Runtime.verdicts`` (``None`` while nothing is refused), which callers on any thread read
without a lock. Events of the caller's own doing (a mesh spawned, stopped, or some of its
ranks stopped) are applied at once on the caller's thread, under a lock that guards only the
machine, so that a call made right after ``stop()`` on the same thread is refused.

Calls are registered lazily: the hot path of a call does not touch the state machine. Before
any event that may fail calls, the supervisor registers the calls still pending (and retires
those that finished). A call that completed before the trouble cannot be failed by it, so
this is equivalent to registering every call, at no cost while nothing goes wrong.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sys
import threading
import time
import traceback
from dataclasses import replace
from typing import Any

from .. import config
from .._mesh import Shape
from .._runtime._output_catchup import book as lines
from .._runtime._output_tails import tails
from .._runtime._proclog import log_path as proc_log_path
from .._runtime._runtime import Runtime, default_undeliverable_text
from .._supervision import (
    Action,
    ActorFailed,
    CallFinished,
    CallStarted,
    ConnectionLost,
    DeliverToOwner,
    Event,
    FailCalls,
    FailFast,
    FailOwner,
    GraceExpired,
    HookDone,
    InvalidTransition,
    MeshSpawned,
    MeshStopped,
    ProcExited,
    ProcRetired,
    RankRespawned,
    RanksStopped,
    RunRootHook,
    StartGraceTimer,
    SuperviseDone,
    SupervisionState,
)
from .._wire import _messages as wire
from ..errors import MeshFailure, SupervisionError
from . import _failfast
from ._replies import with_sources
from ._supervise import banner, default_unhandled_fault_hook

log = logging.getLogger("regency.supervision")

_DRAIN_BOUND = 1.0  # seconds an exit status waits for the dead proc's connection to end


class Supervisor:
    """Drives the supervision rules of one runtime."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.state = SupervisionState()
        self._ids = itertools.count(1)
        self._known_calls: set[int] = set()
        self._shapes: dict[str, Shape] = {}  # owned mesh -> its shape, for coordinates
        self._addrs: dict[str, tuple[str, ...]] = {}  # owned mesh -> proc address per rank
        # dead proc -> its exit and the actions the machine gave for it, held until its
        # connection has ended (its last replies read) or a bound passed
        self._held: dict[str, tuple[ProcExited, list[Action]]] = {}
        self._filled_reports: dict[str, str] = {}  # machine's report -> the one with details
        self._in_flight: dict[str, str] = {}  # dead proc -> endpoint it was running
        # batches of root hooks waiting for the lines printed before their failures
        self._hooks_waiting: list[list[tuple[RunRootHook, MeshFailure]]] = []
        self._hooks_task: asyncio.Task[None] | None = None
        self._hooks_now = False  # the loop is ending: no more waiting (``hooks_settled``)
        self._lock = threading.RLock()  # guards the machine (and _known_calls) only
        rt.router.close_hooks.append(self.connection_closed)

    def _cause(self, what: str) -> str:
        return f"{what}@{self.rt.address}#{next(self._ids)}"

    # -- events --------------------------------------------------------------------------------
    def mesh_spawned(self, uid: str, owner_uid: str | None, kind: str, name: str,
                     shape: Shape, addrs: tuple[str, ...], actor_class: str = "") -> None:
        """An owned mesh exists (any thread)."""
        members = {g: addrs[g] for g in shape.ranks()}
        self._shapes[uid] = shape
        self._addrs[uid] = addrs
        event = MeshSpawned(uid, owner_uid, kind, name, members,  # type: ignore[arg-type]
                            actor_class, cause_id=self._cause("spawn"))
        self._apply_now(event)

    def mesh_stopped(self, uid: str, reason: str) -> None:
        """A mesh was stopped on purpose (any thread): applied before this returns."""
        self._apply_now(MeshStopped(uid, reason, cause_id=self._cause("stop")))

    def proc_retired(self, addr: str, reason: str) -> None:
        """The proc at ``addr`` said it is being stopped on purpose (loop thread)."""
        self._apply_now(ProcRetired(addr, reason, cause_id=self._cause("stop")))

    def ranks_stopped(self, uid: str, ranks: frozenset[int], reason: str) -> None:
        """Some members of a mesh were stopped on purpose (any thread): applied at once."""
        self._apply_now(RanksStopped(uid, ranks, reason, cause_id=self._cause("stop")))

    def procs_stopped(self, uid: str, ranks: list[int], size: int | None,
                      reason: str) -> list[int]:
        """Stop ``ranks`` of proc mesh ``uid`` (``size`` procs in all, when owned here), in
        the machine, at once; returns those not stopped before, which are to be stopped now.
        Once every proc of the mesh is stopped, the whole mesh is."""
        with self._lock:
            verdicts = self.state.verdicts()
            before = set(verdicts.stopped_ranks(uid, range(size) if size else ranks))
            new = [rank for rank in ranks if rank not in before]
            if not new:
                return []
            if size is not None and len(before) + len(new) >= size:
                self.mesh_stopped(uid, reason)
            else:
                self.ranks_stopped(uid, frozenset(new), reason)
        return new

    def respawned(self, old: str, new: str) -> None:
        """The dead proc at ``old`` was replaced by one at ``new`` (any thread): its members
        move there and run again, at once."""
        for uid, addrs in list(self._addrs.items()):
            if old in addrs:
                self._addrs[uid] = tuple(new if a == old else a for a in addrs)
        self._apply_now(RankRespawned(old, new, cause_id=self._cause("respawn")))

    def undeliverable(self, addr: str, call: wire.Call, why: str) -> str:
        """The refusal of a call whose frame for ``addr`` could not be written (any thread):
        the ranks there and the mesh when this runtime owns it, as the machine words it."""
        with self._lock:
            text = self.state.undeliverable(call.mesh_uid, call.endpoint, addr, why)
        return text if text is not None else default_undeliverable_text(addr, call, why)

    def spawn_refusal(self, uid: str, name: str,
                      members: list[tuple[int, str]]) -> tuple[str, bool] | None:
        """The machine's answer to a spawn on ``members`` of proc mesh ``uid`` (any thread)."""
        verdicts = self.rt.verdicts
        return None if verdicts is None else verdicts.spawn_refusal(uid, name, members)

    def _apply_now(self, event: Event) -> None:
        """Apply an event of the caller's own doing, on its thread. Before a stop, the calls
        still pending are registered: sent before it, they may still be answered."""
        with self._lock:
            actions = [] if isinstance(event, MeshSpawned) else self._handle(*self._sync_calls())
            actions += self._handle(event)
        if actions:  # calls refused when registered: failed on the loop, like every action
            self.rt.call_soon(self._carry_out, actions)

    def _handle(self, *events: Event) -> list[Action]:
        """Hand ``events`` to the machine and publish its verdicts (any thread)."""
        if not events:
            return []
        with self._lock:
            try:
                actions = self.state.handle(*events)
            except InvalidTransition as exc:
                log.error("regency: supervision: %s", exc)
                actions = list(getattr(exc, "actions", []) or [])
            verdicts = self.state.verdicts()
            self.rt.verdicts = None if verdicts.empty else verdicts
        return actions

    def actor_failed(self, uid: str, rank: int, failure: MeshFailure) -> None:
        self.trouble(ActorFailed(uid, rank, failure, cause_id=self._cause("failed")))

    def proc_exited(self, msg: wire.ProcExited, drain: bool = True) -> None:
        """The host agent reaped a proc. The machine hears of it at once (new calls are
        refused from now on), but its replies may still be unread on our connection to it
        (the exit status travels another way), so what the exit calls for is carried out
        once that connection has ended, or after a bound."""
        addr = msg.addr
        if addr in self._held:
            return  # the same exit, heard twice while its actions wait
        if msg.endpoint:
            self._in_flight[addr] = str(msg.endpoint)  # "module.Class.endpoint"
        event = ProcExited(addr, msg.cause, bool(msg.expected), msg.pid, msg.host,
                           tuple(msg.last_lines), time.time(), cause_id=self._cause("exit"))
        if drain and self.rt.router.live_connections(addr):
            self._held[addr] = (event, [])
            self.rt.loop.call_later(_DRAIN_BOUND, self._release, addr)
        self.trouble(event)

    def connection_closed(self, addr: str) -> None:
        """Some connection with ``addr`` ended; carry out a held exit once none is left."""
        if addr in self._held and not self.rt.router.live_connections(addr):
            self._release(addr)

    def _release(self, addr: str) -> None:
        held = self._held.pop(addr, None)
        if held is not None:
            event, actions = held
            self._carry_out(actions)
            self._release_waiters(addr, f"the proc at {addr} {event.cause}")

    def _release_waiters(self, addr: str, why: str) -> None:
        """Waiters that are not calls (e.g. a remote RDMA drop) learn of the death too."""
        for port_id, targets in list(self.rt.port_targets.items()):
            waiter = self.rt.collectors.get(port_id)
            if addr in targets and waiter is not None and getattr(waiter, "route", None) is None:
                waiter.lost(SupervisionError(f"{waiter.label} failed: {why}"))

    def connection_lost(self, addr: str, why: str) -> None:
        if addr in self._held:
            self.connection_closed(addr)
            return
        self.trouble(ConnectionLost(addr, why, cause_id=self._cause("lost")))

    def trouble(self, event: Event) -> None:
        """Register pending calls, then feed ``event`` (loop thread)."""
        with self._lock:
            actions = self._handle(*self._sync_calls())
            actions += self._handle(event)
        held = self._held.get(getattr(event, "addr", ""))
        if isinstance(event, ProcExited) and held is not None and held[0] is event:
            held[1].extend(actions)  # carried out once the proc's replies are read
            return
        self._carry_out(actions)
        if isinstance(event, ProcExited):
            self._release_waiters(event.addr, f"the proc at {event.addr} {event.cause}")
        elif isinstance(event, ConnectionLost):
            self._release_waiters(event.addr, event.reason)

    def _sync_calls(self) -> list[Event]:
        """The events that bring the machine's pending calls up to date (under the lock)."""
        collectors = self.rt.collectors
        events: list[Event] = []
        for call_id in list(self._known_calls):
            if call_id not in collectors:
                self._known_calls.discard(call_id)
                events.append(CallFinished(call_id, cause_id=self._cause("done")))
        for call_id, c in list(collectors.items()):
            if call_id in self._known_calls or getattr(c, "route", None) is None:
                continue  # known already, or a plain waiter (see _release_waiters)
            expected = c.expected
            if not expected:
                continue
            route = c.route
            addrs = {g: a for g, a in zip(route.ranks, route.addrs) if g in expected}
            events.append(CallStarted(call_id, c.uid, frozenset(expected), c.endpoint,
                                      addrs, cause_id=self._cause("call")))
            self._known_calls.add(call_id)
        return events

    def feed(self, *events: Event) -> None:
        """Hand events to the state machine and carry out its actions (loop thread)."""
        self._carry_out(self._handle(*events))

    def _carry_out(self, actions: list[Action]) -> None:
        """Carry out the machine's actions (loop thread).

        Root-hook deliveries of one batch (one proc death can fail several meshes) run
        together, actor meshes first, and end in at most one fail-fast report naming them all.
        """
        # fill the failures in now, while the calls they name are still pending
        hooks = [(a, self._fill(a.failure)) for a in actions if isinstance(a, RunRootHook)]
        # when one proc death fails several meshes, the actor mesh (with class and endpoint)
        # is delivered first: it is the more useful story
        actions = sorted(actions, key=lambda a: not (isinstance(a, DeliverToOwner)
                                                     and a.failure.actor_class))
        for action in actions:
            if isinstance(action, RunRootHook):
                continue
            try:
                self._do(action)
            except Exception:
                log.exception("regency: supervision action %r failed", action)
        if hooks:
            hooks.sort(key=lambda pair: not pair[1].actor_class)
            self._after_lines(hooks)

    # -- actions -------------------------------------------------------------------------------
    def _do(self, action: Any) -> None:
        if isinstance(action, FailCalls):
            self._fail_calls(action)
        elif isinstance(action, StartGraceTimer):
            self.rt.loop.call_later(action.seconds, self.trouble,
                                    GraceExpired(action.addr, cause_id=self._cause("grace")))
        elif isinstance(action, DeliverToOwner):
            self._deliver(action)
        elif isinstance(action, FailOwner):
            self._fail_owner(action)
        elif isinstance(action, FailFast):
            _failfast.fail_fast(banner(action.report), action.exit_code)

    def _fail_calls(self, action: FailCalls) -> None:
        failure = self._fill(action.failure) if action.failure is not None else None
        with self._lock:  # a stop on another thread may be registering calls
            self._known_calls.difference_update(action.call_ids)
        for call_id in action.call_ids:
            collector = self.rt.collectors.get(call_id)
            if collector is not None:
                collector.lost(SupervisionError(action.message, failure))

    def _fill(self, failure: MeshFailure) -> MeshFailure:
        """Add what the pure machine leaves out: local ranks and coordinates of the mesh (when
        we know its shape) and the endpoint a pending call had in flight on those ranks."""
        if failure.endpoint is None:
            for c in self.rt.collectors.values():
                if getattr(c, "uid", None) == failure.mesh_name and c.expected.intersection(
                        failure.ranks):
                    failure = replace(failure, endpoint=c.endpoint)
                    break
        if "<dynamic-code>" in failure.traceback:
            failure = replace(failure, traceback=with_sources(failure.traceback))
        shape = self._shapes.get(failure.mesh_name)
        if shape is None:
            return failure
        if not failure.coords:
            try:
                local = [shape.local_rank(g) for g in failure.ranks]
            except ValueError:
                return failure
            failure = replace(failure, ranks=local, coords=[dict(shape.point(r)) for r in local])
        if not failure.last_lines:
            failure = replace(failure, last_lines=self._last_lines(failure, shape))
        if not failure.log_path:
            addr = self._addr_of(failure, shape)
            if addr:
                failure = replace(failure, log_path=str(proc_log_path(addr)))
        if failure.endpoint is None and failure.actor_class:
            actor_class, _, endpoint = self._in_flight.get(
                self._addr_of(failure, shape), "").rpartition(".")
            if actor_class == failure.actor_class:  # not another actor's of that proc
                failure = replace(failure, endpoint=endpoint)
        return failure

    def _addr_of(self, failure: MeshFailure, shape: Shape) -> str:
        addrs = self._addrs.get(failure.mesh_name)
        if addrs is None or not failure.ranks:
            return ""
        try:
            return addrs[shape.global_rank(failure.ranks[0])]
        except (IndexError, ValueError):
            return ""

    def _last_lines(self, failure: MeshFailure, shape: Shape) -> list[str]:
        """What the failed proc printed last: from its host agent's tail when that agent is
        this process's, else from the lines its worker's agent forwarded here."""
        addr = self._addr_of(failure, shape)
        if not addr:
            return []
        agent = self.rt.agent
        local = list(agent.tail(addr)) if agent is not None else []
        return local or tails.last(addr, int(config.get("tail_log_lines")))

    def _with_lines_now(self, action: RunRootHook, failure: MeshFailure) -> MeshFailure:
        """``failure`` with the lines its proc printed up to now, when its own report did
        not carry them (a worker's proc: its last lines may have come after its failure)."""
        if action.failure.last_lines:
            return failure
        shape = self._shapes.get(failure.mesh_name)
        lines = self._last_lines(failure, shape) if shape is not None else []
        return replace(failure, last_lines=lines) if lines else failure

    def _deliver(self, action: DeliverToOwner) -> None:
        cell = self.rt.cells.get(action.owner_uid)
        behavior = getattr(cell, "behavior", None)
        failure = self._fill(action.failure)
        # if the owner does not handle it, its own failure's chain should tell this story
        self._filled_reports[action.failure.report()] = failure.report()
        if cell is None or behavior is None:
            log.error("regency: the owner %s of a failed mesh is gone:\n%s", action.owner_uid,
                      failure.report())
            return

        def done(handled: bool, error: BaseException | None) -> None:
            tb = "".join(traceback.format_exception(error)) if error is not None else ""
            event = SuperviseDone(action.owner_uid, action.failure_id, handled,
                                  f"{type(error).__name__}: {error}" if error else None, tb,
                                  cause_id=self._cause("supervised"))
            self.rt.call_soon(self.feed, event)

        cell.control(lambda: behavior.supervise(failure, done))

    def _after_lines(self, hooks: list[tuple[RunRootHook, MeshFailure]]) -> None:
        """Run the root hooks once the lines printed before the failures are written (a
        worker host's proc sends an output mark before its failure, ``_output_catchup``):
        the report comes after them, and hooks run in the order their failures came (loop
        thread). At once while no proc is behind, or once the controller's loop is ending
        (``hooks_settled``)."""
        waiting = self._hooks_waiting
        waiting.append(hooks)
        if self._hooks_now or (len(waiting) == 1 and not lines.behind):
            self._run_waiting_hooks(len(waiting))
        elif len(waiting) == 1:  # (the task is kept: the loop holds tasks weakly)
            self._hooks_task = self.rt.loop.create_task(self._root_hooks_after_lines())

    async def _root_hooks_after_lines(self) -> None:
        try:
            while self._hooks_waiting:
                await lines.caught_up()  # 1 s at most (``TIMEOUT_S``)
                self._run_waiting_hooks(1)
        finally:  # cancelled (the controller is stopping): the hooks run all the same
            self._run_waiting_hooks(len(self._hooks_waiting))

    async def hooks_settled(self, timeout: float) -> None:
        """Let the root hooks waiting for lines run (``timeout`` seconds at most), then run
        later ones at once: the controller is shutting down, its loop's tasks are about to
        be cancelled (loop thread)."""
        task = self._hooks_task
        if task is not None and not task.done():
            await asyncio.wait([task], timeout=timeout)
        self._hooks_now = True
        self._run_waiting_hooks(len(self._hooks_waiting))

    def _run_waiting_hooks(self, count: int) -> None:
        """Run the first ``count`` batches of waiting root hooks (loop thread; fewer when
        fewer wait: ``hooks_settled`` may have run them while the task waited)."""
        for _ in range(min(count, len(self._hooks_waiting))):
            hooks = self._hooks_waiting.pop(0)
            try:
                self._root_hooks([(a, self._with_lines_now(a, f)) for a, f in hooks])
            except Exception:
                log.exception("regency: the root hook of a failure could not run")

    def _root_hooks(self, hooks: list[tuple[RunRootHook, MeshFailure]]) -> None:
        module = sys.modules.get("regency.actor")
        hook: Any = getattr(module, "unhandled_fault_hook", default_unhandled_fault_hook)
        done: list[Event] = []
        fatal_reports: list[str] = []
        for action, failure in hooks:
            exit_requested = False
            try:
                hook(failure)
            except BaseException as exc:
                exit_requested = True
                if not isinstance(exc, SystemExit):
                    log.error("regency: unhandled_fault_hook raised %r", exc)
            done.append(HookDone(action.failure_id, exit_requested, cause_id=self._cause("hook")))
            if exit_requested:
                fatal_reports.append(failure.report())
        fatal = self._handle(*done)
        if any(isinstance(a, FailFast) for a in fatal):
            _failfast.fail_fast(banner("\n\n".join(fatal_reports)), 1)

    def _fail_owner(self, action: FailOwner) -> None:
        cell = self.rt.cells.get(action.owner_uid)
        behavior = getattr(cell, "behavior", None)
        if cell is None or behavior is None:
            return
        chain = [self._filled_reports.pop(r, r) for r in action.failure.chain]
        failure = replace(action.failure, chain=chain)
        cell.control(lambda: behavior.fail_with(failure))
