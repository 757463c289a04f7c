"""A proc's descendants end with it: what an actor started (a subprocess, a server, a
shell's background job) is not left running when its proc stops or dies (ADR 0040).

The fork server (``_zygote``) does it, with three nets, because a descendant can slip
through each one:

* **its group**: a proc leads a process group of its own, which its children join unless
  they make one (``start_new_session=True``, a daemon's ``setsid``);
* **its mark**: a proc's environment carries :data:`MARK` (``rg`` and 12 random hex
  digits, never given twice), which the programs it runs inherit unless they are given an
  environment of their own; a child it forks without running a program keeps the fork
  server's environment in ``/proc`` (what Python's ``os.environ`` changes is not there),
  so it gets the mark as its name instead (``comm``, set after each ``os.fork`` of the
  proc: :func:`mark_forks`);
* **adoption**: the fork server is a child subreaper, so a descendant whose parent ended
  is adopted by it rather than by init; what it adopted ends with it (when its host agent
  goes: the controller's exit, even a SIGKILL, or a worker's release).

When a proc ends, its group and the processes with its mark get SIGTERM, and those still
there :data:`GRACE_S` later SIGKILL. Nothing here starts a thread (the fork server must
not have one); Linux only, as regency is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import secrets
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["END_ALL_S", "GRACE_S", "MARK", "Endings", "adopted", "become_subreaper", "mark_forks",
           "marked", "new_mark", "signal_group",
           "signal_pid"]

#: The environment variable that names a proc's tree; its value is :func:`new_mark`'s.
MARK = "REGENCY_PROC_TREE"
#: Seconds between the SIGTERM of a proc's descendants and the SIGKILL of those left.
GRACE_S = 2.0
#: Seconds an ending fork server keeps killing what its procs left (their threads end).
END_ALL_S = 1.5

_PR_SET_NAME = 15
_PR_SET_CHILD_SUBREAPER = 36


def new_mark() -> str:
    """A proc's mark: random, never given twice (a pid is: an old proc's grace must not
    reach a new proc that got its pid), and short enough to be a process name (15 bytes)."""
    return "rg" + secrets.token_hex(6)


@functools.cache
def _libc() -> Any:
    """The C library, loaded once (finding it runs ``ldconfig``: never in a fresh fork)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _prctl(option: int, arg: int | bytes) -> bool:
    try:
        return int(_libc().prctl(option, arg, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux ``prctl``); whether it did."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def mark_forks() -> None:
    """In a proc whose descendants end with it: name each child it forks after its mark."""
    mark = os.environ.get(MARK)
    if mark:
        try:
            _libc()  # now, not in each child
        except OSError:
            return
        os.register_at_fork(after_in_child=lambda: _prctl(_PR_SET_NAME, mark.encode()))


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to the process group ``pgid`` (gone, or not ours: nothing)."""
    _send(os.killpg, pgid, sig)


def signal_pid(pid: int, sig: int) -> None:
    """Send ``sig`` to the process ``pid`` (gone, or not ours: nothing)."""
    _send(os.kill, pid, sig)


def _send(kill: Callable[[int, int], None], target: int, sig: int) -> None:
    try:
        kill(target, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _each_process(part: str, skip: int = 0) -> Iterator[tuple[int, bytes]]:
    """``(pid, /proc/<pid>/<part>)`` of every process this one may read but ``skip``."""
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == skip:
            continue
        try:
            with open(f"/proc/{name}/{part}", "rb") as f:
                yield int(name), f.read()
        except OSError:  # gone, or another user's
            continue


def marked(marks: set[str], skip: int = 0) -> dict[int, str]:
    """``{pid: mark}`` of the processes whose environment carries one of ``marks``, or
    whose name is one (forked without running a program)."""
    if not marks:
        return {}
    wanted = {f"{MARK}={mark}".encode(): mark for mark in marks}
    prefix = f"{MARK}=".encode()
    found: dict[int, str] = {}
    for pid, environ in _each_process("environ", skip):
        if prefix in environ:
            mark = next((wanted[e] for e in environ.split(b"\0") if e in wanted), None)
            if mark is not None:
                found[pid] = mark
    names = {mark.encode(): mark for mark in marks}
    for pid, comm in _each_process("comm", skip):
        mark = names.get(comm.rstrip(b"\n"))
        if mark is not None:
            found[pid] = mark
    return found


def adopted(parent: int) -> list[int]:
    """The live (not zombie) children of ``parent``, this fork server."""
    return [pid for pid, (state, ppid, _, _) in _stats() if state != b"Z" and ppid == parent]


def _stats() -> Iterator[tuple[int, tuple[bytes, int, int, int]]]:
    """``(pid, (state, parent, process group, start time))`` of every process."""
    for pid, stat in _each_process("stat"):
        fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) "
        if len(fields) > 19:
            yield pid, (fields[0], int(fields[1]), int(fields[2]), int(fields[19]))


#: A process, known for sure: its pid and its start time (a pid alone may be another's).
Known = tuple[int, int]


def _groups_of(pgids: Iterable[int]) -> dict[int, set[Known]]:
    """The members of each process group of ``pgids`` (one scan of ``/proc``)."""
    groups: dict[int, set[Known]] = {pgid: set() for pgid in pgids}
    for pid, (_, _, group, start) in _stats():
        members = groups.get(group)
        if members is not None:
            members.add((pid, start))
    return groups


def _group_of(pgid: int) -> set[Known]:
    """The members of the process group ``pgid``."""
    return _groups_of([pgid])[pgid]


def _still_ours(pgid: int, members: set[Known], now: set[Known] | None = None) -> bool:
    """Whether the group ``pgid`` (its members ``now``, read when not given) is the one
    whose ``members`` were seen: one of them is still in it, so it never emptied, and its
    id (a pid) cannot be another's since."""
    return bool(members & (_group_of(pgid) if now is None else now))


class Endings:
    """The fork server's book of procs whose descendants are ending: SIGTERM now, SIGKILL
    for what is left :data:`GRACE_S` later.

    A proc's group is signalled by its id, the proc's pid, which is free for reuse once
    the group is empty: the SIGKILL goes to the group only while a member seen at the
    SIGTERM is still in it (then the id cannot have been reused); what left the group is
    found by its mark."""

    def __init__(self) -> None:
        # (when, {proc pid: its mark}, {proc pid: its group's members at the SIGTERM})
        self._due: list[tuple[float, dict[int, str], dict[int, set[Known]]]] = []

    def begin(self, ended: dict[int, str]) -> None:
        """These procs ended and were reaped (``{pid: mark}``): SIGTERM their groups and
        marked processes."""
        if not ended:
            return
        groups = _groups_of(ended)
        for pid, members in groups.items():
            if members:  # not empty: its id is still the proc's
                signal_group(pid, signal.SIGTERM)
        _signal_marked(ended, signal.SIGTERM)
        self._due.append((time.monotonic() + GRACE_S, ended, groups))

    def timeout(self) -> float | None:
        """Seconds until the next SIGKILL is due (None: none is)."""
        if not self._due:
            return None
        return max(0.0, min(when for when, _, _ in self._due) - time.monotonic())

    def due(self) -> None:
        """SIGKILL what is left of the procs whose grace ended."""
        now = time.monotonic()
        if not any(when <= now for when, _, _ in self._due):
            return
        ready = [d for d in self._due if d[0] <= now]
        self._due = [d for d in self._due if d[0] > now]
        for _, ended, groups in ready:
            self._kill_left(ended, groups)

    def _kill_left(self, ended: dict[int, str], groups: dict[int, set[Known]]) -> None:
        now = _groups_of(groups)
        for pid, members in groups.items():
            if members and _still_ours(pid, members, now[pid]):
                signal_group(pid, signal.SIGKILL)
        _signal_marked(ended, signal.SIGKILL)  # marks are never given twice

    def end_all(self, procs: dict[int, str], live: set[int], bound: float = END_ALL_S) -> None:
        """The fork server is ending: SIGKILL its procs not reaped yet (``live``; those of
        ``procs``, ``{pid: mark}``, with their groups and marked processes), what is left
        of those ending, and whatever it adopted, until none is left (``bound`` seconds at
        most: a proc's children are adopted only once its last thread has ended)."""
        pending, self._due = self._due, []
        waiting = set(live)
        me = os.getpid()
        deadline = time.monotonic() + bound
        while True:
            for pid in waiting:  # not reaped: its pid, and its group's id, are its own
                signal_pid(pid, signal.SIGKILL)
                if pid in procs:
                    signal_group(pid, signal.SIGKILL)
            _signal_marked(procs, signal.SIGKILL)
            for _, ended, groups in pending:
                self._kill_left(ended, groups)
            left = adopted(me)
            for pid in left:
                signal_pid(pid, signal.SIGKILL)
            waiting -= _reap_all()
            if (not left and not waiting) or time.monotonic() > deadline:
                return
            time.sleep(0.005)


def _signal_marked(trees: dict[int, str], sig: int) -> None:
    """Send ``sig`` to the processes with the mark of one of ``trees``."""
    for pid in marked(set(trees.values()), os.getpid()):
        signal_pid(pid, sig)


def _reap_all() -> set[int]:
    """Collect the exit of every child that ended (no zombies left behind); their pids."""
    reaped: set[int] = set()
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.add(pid)
