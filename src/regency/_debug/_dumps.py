"""Python stacks of a proc, whatever it is doing: ``faulthandler`` on a signal, into a file.

Every proc registers :mod:`faulthandler` for :data:`SIGNAL` with ``all_threads=True``
(:func:`arm`), writing into its own append-only file in the per-user runtime directory.
The handler is C code run in the signal handler: it needs neither the GIL nor the proc's
event loop, so it answers from a proc spinning in a tight Python loop, blocked in a C call
that holds the GIL, or paused in pdb. The host agent of the proc's machine (which knows its
pid) sends the signal and reads what the file grew by (:func:`dump_pids`); it is the only
party that needs to be on the same machine.

Why not py-spy: it is an extra binary, needs ptrace rights (``kernel.yama.ptrace_scope``,
container capabilities) that many clusters deny, and samples from outside; faulthandler is
in the standard library and works wherever the proc can take a signal. What faulthandler
does not give: thread names, local variables, and more than 100 frames per thread.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time
from pathlib import Path
from typing import IO

from ._discovery import runtime_dir

__all__ = ["SIGNAL", "arm", "dump_pids", "forget", "stack_file"]

#: The signal that asks a proc for its stacks (a real-time one: no library uses it by default).
SIGNAL = signal.SIGRTMIN + 6
_SETTLE_S = 0.02  # a dump is complete once its file stopped growing for this long
_armed: IO[bytes] | None = None


def stack_file(pid: int) -> Path:
    """Where the proc ``pid`` of this machine writes its stacks."""
    path = runtime_dir() / "stacks"
    path.mkdir(mode=0o700, exist_ok=True)
    return path / f"{pid}.txt"


def arm() -> None:
    """In a proc: dump every thread's stack into :func:`stack_file` on :data:`SIGNAL`."""
    global _armed
    try:
        path = stack_file(os.getpid())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
    except OSError:
        return  # no runtime directory: stack dumps of this proc say so
    _armed = os.fdopen(fd, "wb", buffering=0)
    faulthandler.register(SIGNAL, file=_armed, all_threads=True, chain=False)


def dump_pids(pids: list[int], timeout: float = 1.0) -> dict[int, str]:
    """Signal every proc in ``pids`` at once and collect what each wrote (blocking).

    A proc that wrote nothing within ``timeout`` gets a line saying why instead."""
    start: dict[int, int] = {}
    out: dict[int, str] = {}
    for pid in pids:
        path = stack_file(pid)
        try:
            start[pid] = path.stat().st_size
            os.kill(pid, SIGNAL)
        except FileNotFoundError:
            out[pid] = "(no stack file: the proc did not arm stack dumps)"
        except ProcessLookupError:
            out[pid] = "(the proc has exited)"
    deadline = time.monotonic() + timeout
    sizes = dict(start)
    settled: dict[int, float] = {}
    while len(out) < len(pids) and time.monotonic() < deadline:
        time.sleep(0.005)
        now = time.monotonic()
        for pid in start:
            if pid in out:
                continue
            try:
                size = stack_file(pid).stat().st_size
            except OSError:
                size = sizes[pid]
            if size != sizes[pid]:
                sizes[pid], settled[pid] = size, now
            elif size > start[pid] and now - settled.get(pid, now) >= _SETTLE_S:
                out[pid] = _read(pid, start[pid], size)
    for pid in start:
        if pid not in out:
            out[pid] = (_read(pid, start[pid], sizes[pid]) if sizes[pid] > start[pid] else
                        f"(no stacks within {timeout}s: the proc does not take signals)")
    _forget_dead()
    return out


def forget(pid: int) -> None:
    """The proc ``pid`` exited: remove its stack file."""
    try:
        stack_file(pid).unlink(missing_ok=True)
    except OSError:
        pass


def _read(pid: int, begin: int, end: int) -> str:
    with open(stack_file(pid), "rb") as f:
        f.seek(begin)
        return f.read(end - begin).decode("utf-8", "replace")


def _forget_dead() -> None:
    """Remove the stack files of procs that are gone."""
    for path in stack_file(0).parent.glob("*.txt"):
        try:
            os.kill(int(path.stem), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except (ValueError, PermissionError, OSError):
            continue
