"""Actors for ``test_proc_descendants`` (importable by procs): each starts processes that
leave the nets of ``_descendants`` one by one."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import time

from regency.actor import Actor, endpoint

#: What each started process does to get away from its proc.
KINDS = ("child", "own session", "own environment", "grandchild of a shell", "both")


class Starter(Actor):
    @endpoint
    def start(self, seconds: int = 600) -> dict[str, int]:
        """Start one ``sleep`` of each kind; ``{kind: pid}``."""
        bare = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        sleep = ["sleep", str(seconds)]
        pids = {
            "child": subprocess.Popen(sleep).pid,
            "own session": subprocess.Popen(sleep, start_new_session=True).pid,
            "own environment": subprocess.Popen(sleep, env=bare).pid,
            "both": subprocess.Popen(sleep, start_new_session=True, env=bare).pid,
        }
        shell = subprocess.Popen(["sh", "-c", f"sleep {seconds} & echo $!"],
                                 stdout=subprocess.PIPE, text=True)
        assert shell.stdout is not None
        pids["grandchild of a shell"] = int(shell.stdout.readline())
        shell.wait()  # its sleep is an orphan now: adopted by the fork server
        return pids

    @endpoint
    def fork_away(self) -> int:
        """A child forked without running a program that makes a session of its own: it
        keeps the fork server's environment in ``/proc``; only its name marks it."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.setsid()
            os.close(r)
            os.write(w, b"x")
            os.close(w)
            time.sleep(600)
            os._exit(0)
        os.close(w)
        os.read(r, 1)  # it is in its own session now
        os.close(r)
        return pid

    @endpoint
    def mark(self) -> str:
        return os.environ["REGENCY_PROC_TREE"]

    @endpoint
    def forked_sigterm(self) -> tuple[bool, str]:
        """In a child forked here: whether SIGTERM is back to its default, and its name."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            default = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
            with open(f"/proc/{os.getpid()}/comm") as f:
                os.write(w, f"{int(default)}{f.read().strip()}".encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            said = f.read().decode()
        os.waitpid(pid, 0)
        return said[0] == "1", said[1:]

    @endpoint
    def start_stubborn(self) -> int:
        """A child that ignores SIGTERM; its pid once it does."""
        child = subprocess.Popen(
            ["python3", "-c", "import signal, sys, time; "
             "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
             "time.sleep(600)"], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        child.stdout.readline()
        return child.pid

    @endpoint
    def start_multiprocessing(self, daemon: bool) -> int:
        """A ``multiprocessing`` child that sleeps (its pid): ``multiprocessing`` joins
        it when the proc exits."""
        child = multiprocessing.Process(target=time.sleep, args=(600,), daemon=daemon)
        child.start()
        self.child = child
        return child.pid or 0

    @endpoint
    def pid(self) -> int:
        return os.getpid()
