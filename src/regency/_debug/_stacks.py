"""Stacks of every thread of every proc, grouped: ``procs.stacks()`` and ``regency stack``.

The controller asks each host agent of a mesh for its procs' stacks (``DumpStacks``); each
agent signals its procs (:mod:`._dumps`) in parallel, off its loop, and answers with the
text faulthandler wrote. The controller parses that into :class:`ThreadStack` records and
groups identical stacks (:meth:`Stacks.groups`), so that 16 ranks idle in the same place
read as one stack shared by 16 ranks, and the odd rank out stands out.
"""

from __future__ import annotations

import linecache
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._runtime._aggregate import ranges
from .._runtime._script import script
from .._wire._messages import OK
from ._agents import ProcRef, ask_agents
from ._dumps import dump_pids, forget
from ._messages import DumpStacks

if TYPE_CHECKING:
    from .._runtime._host_agent import HostAgent
    from .._runtime._runtime import Runtime

__all__ = ["StackGroup", "Stacks", "ThreadStack", "collect", "parse_dump", "serve_dumps"]

_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):$")


@dataclass(frozen=True)
class ThreadStack:
    """One thread of one proc: its frames, innermost first, as faulthandler prints them."""

    mesh: str
    rank: int
    thread: str  # the thread's id (faulthandler gives no names)
    current: bool  # the thread the signal interrupted (the proc's main thread, mostly)
    frames: tuple[str, ...]


@dataclass(frozen=True)
class StackGroup:
    """Threads with identical stacks, and which (mesh, rank) they belong to."""

    frames: tuple[str, ...]
    members: tuple[tuple[str, int], ...]


@dataclass
class Stacks:
    """The stacks of a set of procs, by thread; ``str()`` shows them grouped."""

    threads: list[ThreadStack] = field(default_factory=list)
    missing: dict[tuple[str, int], str] = field(default_factory=dict)  # why a proc gave none

    def groups(self) -> list[StackGroup]:
        """Identical stacks together, the most shared first."""
        by_frames: dict[tuple[str, ...], list[tuple[str, int]]] = {}
        for t in self.threads:
            by_frames.setdefault(t.frames, []).append((t.mesh, t.rank))
        groups = [StackGroup(f, tuple(sorted(m))) for f, m in by_frames.items()]
        return sorted(groups, key=lambda g: (-len(g.members), g.members))

    def of(self, mesh: str, rank: int) -> list[ThreadStack]:
        """The threads of one proc."""
        return [t for t in self.threads if t.mesh == mesh and t.rank == rank]

    def __str__(self) -> str:
        out = []
        for g in self.groups():
            n = len(g.members)
            out.append(f"--- {n} thread{'s' if n != 1 else ''} in {_members(g.members)} "
                       "(most recent call first):\n")
            out.extend(f"  {_with_source(line)}\n" for line in g.frames)
        for (mesh, rank), why in sorted(self.missing.items()):
            out.append(f"--- {mesh} rank {rank}: {why}\n")
        return "".join(out)


_FRAME = re.compile(r'^File "(.*)", line (\d+) in (.*)$')


def _with_source(frame: str) -> str:
    """A faulthandler frame line, with its source line where this process can find it
    (code carried by value from ``__main__`` is named ``<dynamic-code>``)."""
    found = _FRAME.match(frame)
    if found is None:
        return frame
    name, number = found.group(1), int(found.group(2))
    if name == "<dynamic-code>":
        name = script() or name
        frame = f'File "{name}", line {number} in {found.group(3)}'
    source = linecache.getline(name, number).strip()
    return f"{frame}\n      {source}" if source else frame


def _members(members: tuple[tuple[str, int], ...]) -> str:
    by_mesh: dict[str, list[int]] = {}
    for mesh, rank in members:
        by_mesh.setdefault(mesh, []).append(rank)
    return "; ".join(f"{mesh} ranks {ranges(r)}" for mesh, r in by_mesh.items())


def parse_dump(mesh: str, rank: int, text: str) -> list[ThreadStack]:
    """faulthandler's ``all_threads`` output, one record per thread."""
    threads: list[ThreadStack] = []
    head: re.Match[str] | None = None
    frames: list[str] = []

    def flush() -> None:
        if head is not None:
            threads.append(ThreadStack(mesh, rank, head.group(2),
                                       head.group(1) == "Current thread", tuple(frames)))

    for line in text.splitlines():
        found = _THREAD.match(line.strip())
        if found is not None:
            flush()
            head, frames = found, []
        elif line.strip() and head is not None:
            frames.append(line.strip())
    flush()
    return threads


# -- the host agent's side -------------------------------------------------------------------------
def serve_dumps(rt: Runtime, agent: HostAgent) -> None:
    """Answer ``DumpStacks`` for the procs ``agent`` started (a thread per request)."""

    def on_dump(msg: DumpStacks) -> None:
        pids = {addr: agent.procs[addr].pid for addr in msg.addrs
                if addr in agent.procs and agent.procs[addr].pid}

        def work() -> None:
            texts = dump_pids(list(pids.values()), msg.timeout)
            answer = {addr: texts.get(pid, "") for addr, pid in pids.items()}
            for addr in msg.addrs:
                if addr in agent.procs and addr not in answer:
                    answer[addr] = "(the proc is still starting)"
            for addr in msg.addrs:
                answer.setdefault(addr, "(this host has no such proc: it exited)")
            rt.send_reply(msg.port, None, OK, answer)

        threading.Thread(target=work, name="regency-stack-dump", daemon=True).start()

    rt.handle(DumpStacks, on_dump)
    agent.exit_hooks.append(lambda rec: forget(rec.pid) if rec.pid else None)


# -- the controller's side -------------------------------------------------------------------------
def collect(rt: Runtime, procs: list[ProcRef], timeout: float = 1.0) -> Stacks:
    """The stacks of ``procs`` (mesh name, rank, proc address, host agent), blocking."""
    answers = ask_agents(rt, procs, lambda addrs, port: DumpStacks(addrs, port, timeout),
                         timeout + 2.0)
    stacks = Stacks()
    for mesh, rank, addr, _ in procs:
        text = answers.get(addr)
        threads = parse_dump(mesh, rank, text) if text else []
        if threads:
            stacks.threads.extend(threads)
        else:
            stacks.missing[(mesh, rank)] = (text or "(no answer from its host agent)").strip()
    return stacks


def job_procs(rt: Runtime) -> list[tuple[str, int, str, str]]:
    """Every live proc this controller spawned: (mesh name, rank, address, host agent)."""
    from .._api._state import api_state

    out = []
    for record in list(api_state(rt).proc_meshes.values()):
        if record.state.stopped:
            continue
        for rank, (addr, agent) in enumerate(zip(record.addr_list, record.agents)):
            if addr not in rt.dead_addrs:
                out.append((record.name, rank, addr, agent))
    return out


#: ``Future.get(timeout=)`` shorter than this does not dump stacks (a polling loop would pay).
MIN_TIMEOUT_FOR_STACKS = 1.0


def where_stuck(label: Any, timeout: float | None) -> str:
    """For a ``TimeoutError``: the grouped stacks of the procs a call still waits on.

    ``label`` is the pending result's ``Completion.label``: a call's collector, or a string
    (not a call); "" when the stacks cannot be had (not a call, a short timeout,
    ``timeout_stack_dump`` off)."""
    from .. import config
    from .._api._state import api_state
    from .._runtime import _current

    collector = None if isinstance(label, str) else label
    route = getattr(collector, "route", None)
    rt = _current.get()
    if (rt is None or route is None or timeout is None or timeout < MIN_TIMEOUT_FOR_STACKS
            or not config.get("timeout_stack_dump")):
        return ""
    waiting = set(getattr(collector, "expected", ()))
    addrs = [a for g, a in zip(route.ranks, route.addrs) if g in waiting][:16]
    found: dict[str, tuple[str, int, str]] = {}
    for record in list(api_state(rt).proc_meshes.values()):
        for rank, (addr, agent) in enumerate(zip(record.addr_list, record.agents)):
            if addr in addrs:
                found[addr] = (record.name, rank, agent)
    procs = [(n, r, a, agent) for a, (n, r, agent) in found.items()]
    if not procs:
        return ""
    try:
        text = str(collect(rt, procs, 1.0))
    except Exception as exc:  # noqa: BLE001 - the timeout is the error; this is a bonus
        return f"\n(no stacks of the callee: {type(exc).__name__}: {exc})"
    return "\nWhere the callee is now (its procs' stacks, grouped):\n" + text
