"""Python stacks of a proc, whatever it is doing: a signal, answered into a file.

Two signals, tried in order (:func:`dump_pids`), both writing faulthandler's text format into
the proc's own append-only file in the per-user runtime directory:

* :data:`SIGNAL` runs a Python-level handler (:func:`_dump_here`) on the proc's main thread,
  which reads every thread's frames with ``sys._current_frames()`` under the GIL. It is safe:
  nothing is read while another thread changes it. It answers from a proc whose loop is idle,
  from a tight Python loop on any thread, from ``time.sleep`` and from pdb, since the
  interpreter runs signal handlers between bytecodes and after interrupted system calls.
* :data:`FALLBACK`, sent only to a proc that did not answer the first within half the
  timeout (its main thread is stuck in a C call that holds the GIL, say), runs
  :mod:`faulthandler`'s C handler with ``all_threads=True``: it needs neither the GIL nor
  the loop, but it reads other threads' states without a lock, and CPython documents that
  this can crash the process when a thread changes its frames meanwhile. That is why it is
  the fallback and not the rule: with it as the rule, a dump taken while a proc resumed from
  SIGSTOP crashed that proc with SIGSEGV (found by the chaos tier).

The host agent of the proc's machine (which knows its pid) sends the signals and reads what
the file grew by; it is the only party that needs to be on the same machine.

Why not py-spy: it is an extra binary, needs ptrace rights (``kernel.yama.ptrace_scope``,
container capabilities) that many clusters deny, and samples from outside; signals and
faulthandler are in the standard library and work wherever the proc can take a signal. What
they do not give: thread names, local variables, and more than 100 frames per thread.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import IO

from ._discovery import runtime_dir

__all__ = ["FALLBACK", "SIGNAL", "arm", "dump_pids", "forget", "stack_file"]

#: The signal that asks a proc for its stacks (a real-time one: no library uses it by default).
SIGNAL = signal.SIGRTMIN + 6
#: The second try, for a proc whose main thread cannot run Python: faulthandler's C handler.
FALLBACK = signal.SIGRTMIN + 7
_MAX_FRAMES = 100  # per thread, as faulthandler
_SETTLE_S = 0.02  # a dump is complete once its file stopped growing for this long
_armed: IO[bytes] | None = None


def stack_file(pid: int) -> Path:
    """Where the proc ``pid`` of this machine writes its stacks."""
    path = runtime_dir() / "stacks"
    path.mkdir(mode=0o700, exist_ok=True)
    return path / f"{pid}.txt"


def arm() -> None:
    """In a proc (main thread): dump every thread's stack into :func:`stack_file` on
    :data:`SIGNAL` (safely, in Python) or :data:`FALLBACK` (faulthandler, in C)."""
    global _armed
    try:
        path = stack_file(os.getpid())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
    except OSError:
        return  # no runtime directory: stack dumps of this proc say so
    _armed = os.fdopen(fd, "wb", buffering=0)
    signal.signal(SIGNAL, _dump_here)
    faulthandler.register(FALLBACK, file=_armed, all_threads=True, chain=False)


def _dump_here(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: every thread's stack, in faulthandler's format (the main
    thread's from where the signal found it, not from this handler)."""
    if _armed is not None:
        frames = sys._current_frames()
        ident = threading.get_ident()
        if frame is not None:
            frames[ident] = frame
        _armed.write(format_threads(frames, ident).encode())


#: Where a proc's main thread starts, below ``run_proc``: the fork server's or the
#: bootstrap program's frames, the same in every proc, left out of dumps.
_LAUNCH = ("/_runtime/_zygote.py", "<frozen runpy>", "/_api/_bootstrap_main.py")


def format_threads(frames: dict[int, FrameType], current: int) -> str:
    """Stacks as faulthandler writes them: a header per thread, the most recent call first
    (a proc's launch frames left out)."""
    out = []
    for ident, top in sorted(frames.items(), key=lambda kv: kv[0] != current):
        head = "Current thread" if ident == current else "Thread"
        out.append(f"{head} 0x{ident:016x} (most recent call first):\n")
        f: FrameType | None = top
        for _ in range(_MAX_FRAMES):
            if f is None or f.f_code.co_filename.endswith(_LAUNCH):
                break
            code = f.f_code
            out.append(f'  File "{code.co_filename}", line {f.f_lineno} in {code.co_name}\n')
            f = f.f_back
        out.append("\n")
    return "".join(out)


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
    begun = time.monotonic()
    deadline, second_try = begun + timeout, begun + timeout / 2
    sizes = dict(start)
    settled: dict[int, float] = {}
    tried: set[int] = set()
    while len(out) < len(pids) and time.monotonic() < deadline:
        time.sleep(0.005)
        now = time.monotonic()
        if now >= second_try:
            _fall_back([p for p in start if p not in out and sizes[p] == start[p]], tried)
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


def _fall_back(pids: list[int], tried: set[int]) -> None:
    """Send :data:`FALLBACK` once to each proc in ``pids`` (silent so far)."""
    for pid in pids:
        if pid not in tried:
            tried.add(pid)
            try:
                os.kill(pid, FALLBACK)
            except ProcessLookupError:
                pass


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
