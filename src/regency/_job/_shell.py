"""``shell``: an interactive terminal on one host of a mesh, through a pseudo-terminal there.

The remote side (``ShellActor``, in a proc spawned on the host) opens a pty, starts the
user's shell on it as the session leader (so the pty is its controlling terminal: job
control, ``Ctrl-C`` as SIGINT to the foreground program, full-screen programs work), and
streams what the pty prints back through a channel. The local side puts this terminal in
raw mode and sends every byte typed as it comes (``Ctrl-C`` is the byte 0x03: the remote
terminal turns it into SIGINT), and a window resize here resizes the remote pty (its
programs get SIGWINCH). Input that is not a terminal (a pipe) is sent as it is, then an
end-of-file (``Ctrl-D``). The exit status of the remote shell is returned.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._cli._exec_actor import ExecActor
from ..actor import Channel, Port, endpoint

if TYPE_CHECKING:
    from .._api._proc_mesh import HostMesh

__all__ = ["ShellActor", "shell"]

# The shell becomes the session leader and takes the pty as its controlling terminal
# before it starts (no preexec_fn in a threaded process).
_TRAMPOLINE = ("import fcntl, os, sys, termios; os.setsid(); "
               "fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execvp(sys.argv[1], sys.argv[1:])")


def _set_size(fd: int, rows: int, cols: int) -> None:
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class ShellActor(ExecActor):
    """Runs one interactive shell on a pty in its proc; its output goes to a port."""

    def __init__(self) -> None:
        super().__init__()
        self.master: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @endpoint
    def start(self, out: Port[Any], env: dict[str, str], workdir: str | None,
              rows: int, cols: int) -> int:
        """Start the shell; its output, then ``("exit", status)``, goes to ``out``. Its pid."""
        import pty

        master, slave = pty.openpty()
        _set_size(master, rows, cols)
        full = self._env(env)
        user_shell = full.get("SHELL") or "/bin/bash"
        if not os.path.exists(user_shell):
            user_shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
        if workdir is None or not os.path.isdir(workdir):
            workdir = full.get("HOME") or "/"
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _TRAMPOLINE, user_shell, "-i"], stdin=slave,
                stdout=slave, stderr=slave, env=full, cwd=workdir, close_fds=True)
        finally:
            os.close(slave)
        self.master = master
        threading.Thread(target=self._pump, args=(master, out), daemon=True,
                         name="regency-shell-out").start()
        return self.proc.pid

    def _pump(self, master: int, out: Port[Any]) -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the pty's other side closed it
                data = b""
            if not data:
                break
            out.send(("out", data))
        assert self.proc is not None
        code = self.proc.wait()
        os.close(master)
        self.master = None
        out.send(("exit", 128 - code if code < 0 else code))

    @endpoint
    def write(self, data: bytes) -> None:
        """Type ``data`` into the shell's terminal."""
        if self.master is not None:
            os.write(self.master, data)

    @endpoint
    def resize(self, rows: int, cols: int) -> None:
        """Resize the terminal (its foreground programs get SIGWINCH)."""
        if self.master is not None:
            _set_size(self.master, rows, cols)

    def __cleanup__(self, exc: BaseException | None) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGHUP)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[bool]:
    """This terminal in raw mode for the block (yields False when ``fd`` is no terminal)."""
    if not os.isatty(fd):
        yield False
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSAFLUSH, saved)


def _size() -> tuple[int, int]:
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
        return size.lines, size.columns
    except OSError:
        return 24, 80


def shell(host_mesh_singleton: HostMesh, *, env: dict[str, str] | None = None,
          workdir: str | None = None) -> int:
    """An interactive shell on the one host of ``host_mesh_singleton``; its exit status.

    Args:
        host_mesh_singleton: a host mesh of exactly one host (slice it first).
        env: extra environment variables for the shell.
        workdir: where it starts (default: this directory's path when it exists there,
            else the home directory).

    Raises:
        ValueError: the mesh has more or fewer than one host.
    """
    if host_mesh_singleton.size() != 1:
        raise ValueError(f"shell needs a host mesh of one host, got "
                         f"{dict(host_mesh_singleton.extent)}: slice it first, e.g. "
                         "hosts.slice(hosts=0)")
    extra = dict(env or {})
    extra.setdefault("TERM", os.environ.get("TERM", "xterm"))
    procs = host_mesh_singleton.spawn_procs(name="shell")
    try:
        actor: Any = procs.spawn("shell", ShellActor)
        out, inbox = Channel[Any].open()
        rows, cols = _size()
        actor.start.call_one(out, extra, workdir or os.getcwd(), rows, cols).get(timeout=60)
        return _session(actor, inbox)
    finally:
        procs.stop().get(timeout=60)


def _session(actor: Any, inbox: Any) -> int:
    """Copy stdin to the remote terminal and its output here until the shell exits."""
    status: list[int] = []
    ended = threading.Event()

    def receive() -> None:
        try:
            while True:
                kind, value = inbox.recv().get()
                if kind == "exit":
                    status.append(int(value))
                    return
                os.write(sys.stdout.fileno(), value)
        except Exception:  # noqa: BLE001 - the proc died: the session is over
            status.append(255)
        finally:
            ended.set()

    threading.Thread(target=receive, daemon=True, name="regency-shell-in").start()
    fd = sys.stdin.fileno()
    old_winch = None
    with _raw(fd) as is_tty:
        if is_tty and threading.current_thread() is threading.main_thread():
            old_winch = signal.signal(signal.SIGWINCH,
                                      lambda *_: actor.resize.broadcast(*_size()))
        try:
            _copy_input(fd, actor, ended, is_tty)
            ended.wait()
        finally:
            if old_winch is not None:
                signal.signal(signal.SIGWINCH, old_winch)
    return status[0] if status else 255


def _copy_input(fd: int, actor: Any, ended: threading.Event, is_tty: bool) -> None:
    while not ended.is_set():
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        if not data:
            if not is_tty:
                actor.write.broadcast(b"\x04")  # end of input: Ctrl-D to the remote shell
            return
        actor.write.broadcast(data)
