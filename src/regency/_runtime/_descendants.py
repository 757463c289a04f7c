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
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["END_ALL_S", "GRACE_S", "MARK", "Endings", "adopted", "become_subreaper", "mark_forks",
           "marked", "new_mark", "signal_group"]

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


def _kill(pid: int, sig: int) -> None:
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
    children = []
    for pid, stat in _each_process("stat"):
        fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) "
        if len(fields) > 1 and fields[0] != b"Z" and int(fields[1]) == parent:
            children.append(pid)
    return children


class Endings:
    """The fork server's book of procs whose descendants are ending: SIGTERM now, SIGKILL
    for what is left :data:`GRACE_S` later."""

    def __init__(self) -> None:
        self._due: list[tuple[float, dict[int, str]]] = []  # (when, {proc pid: its mark})

    def begin(self, ended: dict[int, str]) -> None:
        """These procs ended (``{pid: mark}``): SIGTERM their groups and marked processes."""
        if ended:
            _signal_trees(ended, signal.SIGTERM)
            self._due.append((time.monotonic() + GRACE_S, ended))

    def timeout(self) -> float | None:
        """Seconds until the next SIGKILL is due (None: none is)."""
        if not self._due:
            return None
        return max(0.0, min(when for when, _ in self._due) - time.monotonic())

    def due(self, live: set[int]) -> None:
        """SIGKILL what is left of the procs whose grace ended (``live``: the fork server's
        procs now, whose groups are spared: a pid used again leads a new proc's group)."""
        now = time.monotonic()
        if not any(when <= now for when, _ in self._due):
            return
        trees: dict[int, str] = {}
        for when, ended in self._due:
            if when <= now:
                trees.update(ended)
        self._due = [(when, ended) for when, ended in self._due if when > now]
        _signal_trees(trees, signal.SIGKILL, live)

    def end_all(self, procs: dict[int, str], live: set[int], bound: float = END_ALL_S) -> None:
        """The fork server is ending: SIGKILL ``procs`` (``{pid: mark}``), their groups,
        their marked processes, and whatever it adopted, until none is left (``bound``
        seconds at most). ``live``: its procs not reaped yet, waited for, since a proc's
        children are adopted only once its last thread has ended."""
        trees = dict(procs)
        for _, ended in self._due:
            trees.update(ended)
        self._due.clear()
        waiting = set(live)
        me = os.getpid()
        deadline = time.monotonic() + bound
        while True:
            _signal_trees(trees, signal.SIGKILL)
            for pid in waiting:
                _kill(pid, signal.SIGKILL)
            left = adopted(me)
            for pid in left:
                _kill(pid, signal.SIGKILL)
            waiting -= _reap_all()
            if (not left and not waiting) or time.monotonic() > deadline:
                return
            time.sleep(0.005)


def _signal_trees(trees: dict[int, str], sig: int, spare: set[int] | None = None) -> None:
    """Send ``sig`` to each proc's group (but those of ``spare``) and to the processes with
    its mark."""
    for pid in trees:
        if spare is None or pid not in spare:
            signal_group(pid, sig)
    for pid in marked(set(trees.values()), os.getpid()):
        _kill(pid, sig)


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
