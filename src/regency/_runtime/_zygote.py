"""The fork server: a preloaded, single-threaded process that forks procs on request.

Run as ``python -m regency._runtime._zygote FD`` by a host agent, where FD is a
``SOCK_SEQPACKET`` socket back to it. It imports regency and its dependencies once, then forks
a child per request, so a proc starts in milliseconds instead of a fresh interpreter's
hundreds. It never starts a thread (forking a threaded process is unsafe) and never touches
CUDA.

Requests (pickled dicts, with two file descriptors: the child's stdout and stderr):
``{"token": int, "entry": "module:function", "spec": {...}, "env": {...}, "cwd": str,
"sys_path": [...]}``. Replies: ``("spawned", token, pid)``, ``("exited", pid, wait_status)``.
When the host agent goes away (its socket closes, or the parent-death signal, a SIGHUP it
catches, comes) the zygote kills its children, what they started and what it adopted as a
child subreaper, and exits; each child also receives SIGKILL when the zygote dies
(parent-death signal). What a proc started ends with the proc too (``_descendants``, ADR
0040). It ignores SIGTERM (it ends with its host agent); its children do not.
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import socket
import sys
from typing import Any

from . import _procbind
from ._descendants import MARK, Endings, become_subreaper, new_mark, signal_pid
from ._lifeline import set_parent_death_signal
from ._whole_lines import flush_all

PRELOAD = ("regency._api._proc_main", "numpy")


def _preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _reply(sock: socket.socket, *msg: Any) -> None:
    try:
        sock.send(pickle.dumps(msg))
    except OSError:
        _exit_all()


_children: set[int] = set()
#: The procs whose descendants end with them: ``{pid: mark}`` (``_descendants``).
_trees: dict[int, str] = {}
_endings = Endings()


def _exit_all() -> None:
    for pid in list(_children):
        signal_pid(pid, signal.SIGKILL)
    try:  # what the procs started, and what was adopted here
        _endings.end_all(_trees, _children)
    finally:
        os._exit(0)


def _reap(sock: socket.socket) -> None:
    ended: dict[int, str] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        if pid not in _children:
            continue  # a proc's descendant adopted here (a subreaper): not the agent's
        _children.discard(pid)
        mark = _trees.pop(pid, None)
        if mark is not None:
            ended[pid] = mark
        _reply(sock, "exited", pid, status)
    _endings.begin(ended)  # SIGTERM what they left behind; SIGKILL later (``serve``)


def _child(sock: socket.socket, wake: tuple[int, int], req: dict[str, Any], fds: list[int]) -> None:
    """Runs in the forked child: become the requested proc, never return."""
    code = 1
    try:
        sock.close()
        signal.set_wakeup_fd(-1)
        for fd in wake:
            os.close(fd)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        if MARK in req["env"]:  # its descendants end with it: it leads their group
            os.setpgid(0, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds[:2]:
            os.close(fd)
        req["spec"]["extra_fds"] = fds[2:]  # e.g. the status page; the proc owns them now
        set_parent_death_signal()
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        sys.path[:] = req["sys_path"]
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        _reseed()
        _procbind.apply(req["spec"].get("proc_bind"))  # before a bootstrap command runs too
        # (the proc applies it again, and reports what could not be applied)
        command = req["spec"].get("command")
        if command is not None:
            _exec(command, req)  # never returns
        module, _, func = req["entry"].partition(":")
        code = int(getattr(importlib.import_module(module), func)(req["spec"]) or 0)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            flush_all()  # every thread's unfinished line too
        finally:
            os._exit(code)


def _exec(command: Any, req: dict[str, Any]) -> None:
    """Replace this child by the proc's bootstrap command, handing it the request in a
    memory file (its pid, output pipes and parent-death signal stay)."""
    spec = dict(req["spec"])
    del spec["command"]
    fd = os.memfd_create("regency-proc-spec", 0)  # not close-on-exec
    os.write(fd, pickle.dumps({**req, "spec": spec}))
    os.lseek(fd, 0, os.SEEK_SET)
    for extra in spec.get("extra_fds", []):
        os.set_inheritable(extra, True)
    env = command.environment(req["env"])
    if MARK in req["env"]:  # even with ``inherit_env=False``: its descendants end with it
        env[MARK] = req["env"][MARK]
    env["REGENCY_PROC_SPEC_FD"] = str(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command.program, command.argv(), env)


def _reseed() -> None:
    import random

    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed()


def serve(sock: socket.socket) -> None:
    """Fork children on request until the host agent closes the socket."""
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        try:
            ready, _, _ = select.select([sock.fileno(), rfd], [], [], _endings.timeout())
        except InterruptedError:
            continue
        _endings.due()
        if rfd in ready:
            os.read(rfd, 4096)
            _reap(sock)
        if sock.fileno() not in ready:
            continue
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 22, 4)
        except OSError:
            _exit_all()
        if not msg:
            _exit_all()
        try:
            req = pickle.loads(msg)
        except Exception as exc:  # a bad request must not take the fork server down
            for fd in fds:
                os.close(fd)
            _reply(sock, "failed", None, f"bad spawn request: {exc!r}")
            continue
        mark = None
        if req["spec"].get("kill_descendants", True):  # ``kill_proc_descendants``
            mark = new_mark()  # in its environment (``_descendants``)
            req["env"] = {**req["env"], MARK: mark}
        pid = os.fork()
        if pid == 0:
            _child(sock, (rfd, wfd), req, fds)
        for fd in fds:
            os.close(fd)
        _children.add(pid)
        if mark is not None:
            _trees[pid] = mark
            try:  # the child does it too: whichever runs first (as a shell does)
                os.setpgid(pid, pid)
            except OSError:  # it ran exec already, or ended
                pass
        _reply(sock, "spawned", req["token"], pid)
        _reap(sock)


def main() -> None:
    """Entry point: ``python -m regency._runtime._zygote FD``."""
    # its host agent's end (even a SIGKILL) ends it through the socket; the signal is the
    # second net, caught so that the procs' descendants and adoptees end with it
    signal.signal(signal.SIGHUP, lambda *_: _exit_all())
    set_parent_death_signal(signal.SIGHUP)
    become_subreaper()  # a proc's orphaned descendants come to it, not to init
    if os.getpgid(0) != os.getpid():  # the host agent started it in a group of its own
        os.setpgid(0, 0)  # the terminal's Ctrl-C goes to the controller only
    # SLURM signals every process of a job: the fork server ends with its host agent (the
    # socket closes, or the parent-death signal), never before it, or its procs would be
    # SIGKILLed (parent-death signal) before their __cleanup__ could run.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=int(sys.argv[1]))
    from ._heap import freeze_start_heap
    from ._malloc import reuse_freed_memory

    reuse_freed_memory()  # inherited by every proc forked from here
    _preload()
    freeze_start_heap()  # so is this: a proc's full GC passes skip what the preload made
    serve(sock)


if __name__ == "__main__":
    main()
