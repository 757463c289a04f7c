"""The host agent: spawns procs on this machine through the fork server, watches them,
forwards their output with a ``[mesh rank]`` prefix, and reports how each one ended.

It lives inside a runtime (the controller's for ``this_host()``; a worker's on other
machines) and is driven by system messages:

* ``spawn_procs`` — fork one proc per entry; procs announce themselves with ``proc_ready``,
  which is forwarded to the owner that asked for them;
* ``stop_procs`` — ask procs to stop, SIGKILL those that do not exit in time, then reply;
* a reaped child becomes ``proc_exited`` at its owner, with the cause (exit code or signal)
  and the last lines it printed.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import mmap
import os
import pickle
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TextIO

from .. import config
from .._wire._messages import (
    OK,
    RAW_ERROR,
    AskTopology,
    PortRef,
    ProcExited,
    ProcOutput,
    ProcReady,
    ProcUp,
    Resolve,
    SpawnProcs,
    StopProc,
    StopProcs,
)
from . import _aggregate, _output, _proclog, _topology
from ._descendants import END_ALL_S, signal_pid
from ._runtime import Runtime

log = logging.getLogger("regency.host")


@dataclass(eq=False)
class ProcRecord:
    """What the agent knows of one proc it started."""

    addr: str
    label: str  # "mesh rank" prefix for its output
    owner: str  # address of the runtime that owns the proc mesh
    mesh_uid: str
    rank: int
    pid: int = 0
    ready: bool = False
    killed: bool = False  # we sent it SIGKILL (a stop past its deadline, an orphan, shutdown)
    cgroup: str = ""  # its memory cgroup directory, read once it is up
    status: mmap.mmap | None = None  # shared page where the proc writes its endpoint in flight
    ooms: int = 0  # that cgroup's OOM-kill count when it came up
    physical: str = ""  # where it listens, for procs known by a logical via: name
    stopping: bool = False
    ended_by: str = ""  # why this host stopped it on its own (its worker's SIGTERM)
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=200))
    pipes: list[int] = field(default_factory=list)  # stdout's and stderr's, while open
    pipes_at_start: tuple[int, ...] = ()
    partial: dict[int, bytes] = field(default_factory=dict)
    read: dict[int, int] = field(default_factory=dict)  # bytes read from each pipe
    marked: bool = False  # it sends output marks: each proc_output says ``read`` (ADR 0039)


def open_pipes(rec: ProcRecord) -> list[tuple[int, TextIO]]:
    """The proc's pipes still open, each with the stream its lines go to (the first is
    stdout's: it may close before stderr's)."""
    out_fd = rec.pipes_at_start[0] if rec.pipes_at_start else -1
    return [(fd, sys.stdout if fd == out_fd else sys.stderr) for fd in rec.pipes]


def write_lines(label: str, kind: str, lines: list[str]) -> None:
    """Print a proc's lines on our stdout or stderr, each prefixed with ``[label]``: whole
    lines, never inside a line this process's own code is writing (see ``_output``)."""
    if _aggregate.intercept(label, kind, lines, _write_lines, _later):
        return  # hidden, or held for an aggregation window
    _write_lines(label, kind, lines, None)


def _later(delay: float, fn: Callable[[], None]) -> None:
    try:
        asyncio.get_running_loop().call_later(delay, fn)
    except RuntimeError:  # no loop on this thread: a timer thread
        timer = threading.Timer(delay, fn)
        timer.daemon = True
        timer.start()


def _write_lines(label: str, kind: str, lines: list[str],
                 group: _aggregate.Group | None) -> None:
    if config.get("output_json"):
        now = time.time()
        text = "".join(_aggregate.as_json(label, kind, t, now, group) + "\n" for t in lines)
    else:
        prefix = f"[{label}] " if config.get("prefix_with_rank") else ""
        text = "".join(f"{prefix}{t}\n" for t in lines)
    try:
        held = _output.write_whole(kind, text)
    except (OSError, ValueError):
        return
    guard = _output.guard(kind)
    if held and guard is not None:
        try:  # on the loop thread: write it anyway if the open line stays open
            asyncio.get_running_loop().call_later(_output.HOLD_S, guard.release_overdue)
        except RuntimeError:
            pass  # no loop here: it goes out with the end of the line, or at exit


#: The exit code of a proc that lost its connection to its host agent (``_proc_main``).
AGENT_LOST_EXIT = 75


def describe_status(status: int) -> str:
    """'exited with code 3' / 'killed by signal SIGKILL' from a wait status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"killed by signal {name}"
    code = os.WEXITSTATUS(status)
    if code == AGENT_LOST_EXIT:
        return f"exited with code {code} (it lost its connection to its host agent)"
    return f"exited with code {code}"


def describe_os_error(exc: OSError) -> str:
    """An OSError in words, with what to do when it is a resource limit."""
    text = f"{errno.errorcode.get(exc.errno or 0, 'OSError')}: {exc.strerror or exc}"
    if exc.errno == errno.EMFILE:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return (f"the host agent (pid {os.getpid()}) is out of file descriptors ({text}; "
                f"RLIMIT_NOFILE soft {soft}, hard {hard}): raise the limit where it starts "
                "(ulimit -n, LimitNOFILE= in systemd) or find what holds them")
    if exc.errno == errno.ENFILE:
        return (f"the machine is out of file descriptors ({text}): raise fs.file-max or "
                "free descriptors")
    if exc.errno in (errno.ENOMEM, errno.EAGAIN):
        return f"out of memory or processes ({text})"
    return text


SIGKILL_REAP_S = 5.0  # how long a stop waits for SIGKILLed procs to be reaped
STATUS_BYTES = 128  # the status page: the endpoint a proc is running, NUL-padded


def _status_page(rec: ProcRecord) -> list[int]:
    """A small shared page the proc writes its endpoint in flight to (read if it dies)."""
    try:
        fd = os.memfd_create(f"regency-status-{rec.rank}")
        os.ftruncate(fd, STATUS_BYTES)
        rec.status = mmap.mmap(fd, STATUS_BYTES)
    except (AttributeError, OSError):
        return []  # no memfd here: reports simply lack the endpoint of a crash
    return [fd]


def in_flight(rec: ProcRecord) -> str | None:
    """The endpoint the proc was running when it ended, if it said so."""
    if rec.status is None:
        return None
    name = bytes(rec.status[:STATUS_BYTES]).split(b"\0", 1)[0].decode("utf-8", "replace")
    rec.status.close()
    rec.status = None
    return name or None


def memory_cgroup(pid: int) -> str:
    """The directory of a process's memory cgroup (v2 unified or v1 memory), or ""."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            return "/sys/fs/cgroup" + path
        if "memory" in controllers.split(","):
            return "/sys/fs/cgroup/memory" + path
    return ""


def oom_kills(rec: ProcRecord | None = None) -> int:
    """How many processes the kernel's OOM killer ended in the proc's memory cgroup."""
    base = rec.cgroup if rec is not None and rec.cgroup else "/sys/fs/cgroup"
    for name in ("memory.events", "memory.oom_control"):
        try:
            with open(f"{base}/{name}") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return 0



def _own_process_group() -> dict[str, Any]:
    """``Popen`` arguments that start the fork server in a process group of its own from
    its first instruction: a terminal's Ctrl-C in its first moments (Python starting,
    regency importing) must reach the controller only, not kill it mid-import."""
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"start_new_session": True}  # 3.10: a session of its own (a group leader too)

class HostAgent:
    """Spawns and supervises the procs of one machine on behalf of their owners."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.procs: dict[str, ProcRecord] = {}
        runtime.router.starting = self.starting  # a proc slow to start is not a lost one
        self.by_pid: dict[int, ProcRecord] = {}
        self.by_token: dict[int, ProcRecord] = {}
        self._tokens = 0
        self._sock: socket.socket | None = None
        self._zygote: subprocess.Popen[bytes] | None = None
        self._stop_waiters: list[tuple[set[str], asyncio.Future[None]]] = []
        self._tasks: set[asyncio.Task[None]] = set()  # kept until done; failures logged
        self._outbox: collections.deque[tuple[bytes, list[int]]] = collections.deque()
        self._writer_armed = False
        runtime.handle(SpawnProcs, self._on_spawn_procs)
        runtime.handle(ProcReady, self._on_proc_ready)
        runtime.handle(StopProcs, self._on_stop_procs)
        runtime.handle(Resolve, self._on_resolve)
        runtime.handle(AskTopology, self._on_topology)
        self.advertise_host = ""  # set on workers: procs listen on tcp at this host
        self.forward_to = ""  # set on workers: the controller that gets the procs' output
        self._resolving: dict[str, list[PortRef]] = {}
        self.exit_hooks: list[Callable[[ProcRecord], None]] = []  # services' cleanup per proc
        # services that keep the report of a proc's exit (a worker's kept meshes: their
        # owner may be gone, and the next one hears it)
        self.exit_reports: list[Callable[[ProcRecord, ProcExited], None]] = []
        # whether a proc's output stays in its log file (a worker's kept procs whose
        # controller is not the one attached)
        self.muted: Callable[[ProcRecord], bool] = lambda rec: False

    # -- the fork server -------------------------------------------------------------------
    def start_zygote(self) -> None:
        """Start the fork server (loop thread); idempotent."""
        if self._sock is not None:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._zygote = subprocess.Popen(
            [sys.executable, "-m", "regency._runtime._zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
            **_own_process_group(),
        )
        theirs.close()
        ours.setblocking(False)
        self._sock = ours
        self.rt.loop.add_reader(ours.fileno(), self._on_zygote)

    def _on_zygote(self) -> None:
        assert self._sock is not None
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._zygote_lost()
                return
            msg = pickle.loads(data)
            if msg[0] == "spawned":
                rec = self.by_token.pop(msg[1], None)
                if rec is not None:
                    rec.pid = msg[2]
                    self.by_pid[rec.pid] = rec
                    if rec.killed:  # killed while it was being forked
                        signal_pid(rec.pid, signal.SIGKILL)
            elif msg[0] == "exited":
                self._on_exit(msg[1], msg[2])
            elif msg[0] == "failed":
                log.error("regency: the fork server refused a request: %s", msg[2])

    async def renew_zygote(self, timeout: float) -> None:
        """End the fork server once its procs are reaped (``timeout`` seconds at most), so
        that what they left behind and what it adopted ends with it, and start a fresh one
        (a worker between two controllers; loop thread). Kept as it is when procs are still
        there by then (not reaped, or a new controller's)."""
        addrs = set(self.procs)
        if addrs:
            fut: asyncio.Future[None] = self.rt.loop.create_future()
            waiter = (addrs, fut)
            self._stop_waiters.append(waiter)
            try:
                await asyncio.wait_for(asyncio.shield(fut), timeout)
            except (TimeoutError, asyncio.TimeoutError):
                self._stop_waiters.remove(waiter)
        if self.procs or self._sock is None or self._outbox:
            return
        old = self._zygote
        self.rt.loop.remove_reader(self._sock.fileno())
        self._sock.close()  # it ends: its procs' leftovers and adoptees with it
        self._sock, self._zygote = None, None
        if old is not None:
            threading.Thread(target=_reap_zygote, args=(old,), daemon=True,
                             name="regency-zygote-reaper").start()
        self.start_zygote()

    def _zygote_lost(self) -> None:
        for _, fds in self._outbox:
            for fd in fds:
                os.close(fd)
        self._outbox.clear()
        if self._sock is not None:
            if self._writer_armed:
                self.rt.loop.remove_writer(self._sock.fileno())
                self._writer_armed = False
            self.rt.loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        if not self.rt.stopping:
            log.error("regency: the fork server exited unexpectedly")
        for rec in list(self.procs.values()):
            self._finish(rec, "lost with the fork server")

    # -- spawning --------------------------------------------------------------------------
    def _on_spawn_procs(self, req: SpawnProcs) -> None:
        self.start_zygote()
        for entry in req.procs:
            self._spawn_one(req, entry)

    def _spawn_one(self, req: SpawnProcs, entry: dict[str, Any]) -> None:
        rec = ProcRecord(entry["addr"], entry["label"], req.owner, req.mesh_uid, entry["rank"])
        try:
            out_r, out_w = os.pipe()
        except OSError as exc:
            self._spawn_failed(rec, exc)
            return
        try:
            err_r, err_w = os.pipe()
        except OSError as exc:
            os.close(out_r)
            os.close(out_w)
            self._spawn_failed(rec, exc)
            return
        self._tokens += 1
        # the secret never travels in a request: the agent (same job) hands down its own
        spec = {**req.spec, **entry, "host_agent": self.rt.address, "secret": self.rt.secret}
        if self.forward_to and config.get("enable_log_forwarding"):
            rec.marked = True  # its replies to the controller wait for its lines there
            spec["output_marks_to"] = self.forward_to
        if rec.addr.startswith("via:"):
            spec["bind"] = f"tcp:{self.advertise_host or '127.0.0.1'}:0"
        msg = {"token": self._tokens, "entry": "regency._api._proc_main:run_proc", "spec": spec,
               "env": req.env or dict(os.environ), "cwd": req.cwd or os.getcwd(),
               "sys_path": req.sys_path or list(sys.path)}
        try:
            data = pickle.dumps(msg)
        except Exception as exc:
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            self._notify_owner(rec, f"could not be spawned: {exc}", expected=False)
            return
        self.by_token[self._tokens] = rec
        self.procs[rec.addr] = rec
        rec.pipes = [out_r, err_r]
        rec.pipes_at_start = (out_r, err_r)
        status_fd = _status_page(rec)
        for fd, stream in ((out_r, sys.stdout), (err_r, sys.stderr)):
            os.set_blocking(fd, False)
            self.rt.loop.add_reader(fd, self._read_once, rec, fd, stream)
        self._outbox.append((data, [out_w, err_w, *status_fd]))
        self._flush_outbox()

    def _spawn_failed(self, rec: ProcRecord, exc: OSError) -> None:
        """A proc could not even be started here: its owner hears why (and so does whoever
        asks where it listens), not 'no such proc'."""
        cause = f"could not be spawned on {self.rt.hostname}: {describe_os_error(exc)}"
        log.error("regency: proc %s %s", rec.addr, cause)
        self.rt.mark_dead(rec.addr, f"proc {cause}")
        self._notify_owner(rec, cause, expected=False)

    def _flush_outbox(self) -> None:
        """Hand queued spawn requests to the fork server as its socket takes them."""
        sock = self._sock
        if sock is None:
            return
        while self._outbox:
            data, fds = self._outbox[0]
            try:
                socket.send_fds(sock, [data], fds)
            except BlockingIOError:
                if not self._writer_armed:
                    self._writer_armed = True
                    self.rt.loop.add_writer(sock.fileno(), self._flush_outbox)
                return
            except OSError:
                self._zygote_lost()
                return
            self._outbox.popleft()
            for fd in fds:
                os.close(fd)
        if self._writer_armed:
            self._writer_armed = False
            self.rt.loop.remove_writer(sock.fileno())

    def _on_proc_ready(self, msg: ProcReady) -> None:
        rec = self.procs.get(msg.addr)
        if rec is None:
            return
        rec.ready = True
        rec.physical = msg.physical or rec.addr
        rec.cgroup = memory_cgroup(rec.pid) if rec.pid else ""
        rec.ooms = oom_kills(rec)
        for port in self._resolving.pop(rec.addr, []):
            self.rt.send_reply(port, None, OK, rec.physical)
        self.rt.send_sys(rec.owner, ProcUp(rec.addr, msg.pid, rec.mesh_uid, msg.error))

    def _on_resolve(self, msg: Resolve) -> None:
        """Where does the proc known as ``name`` listen? (answered once it is up)"""
        rec = self.procs.get(msg.name)
        if rec is None:
            why = self.rt.dead_addrs.get(msg.name, "no such proc on this host")
            self.rt.send_reply(msg.port, None, RAW_ERROR, f"{msg.name}: {why}")
        elif rec.ready:
            self.rt.send_reply(msg.port, None, OK, rec.physical)
        else:
            self._resolving.setdefault(rec.addr, []).append(msg.port)

    def _on_topology(self, msg: AskTopology) -> None:
        try:
            this = _topology.describe(_topology.allowed())
        except ValueError as exc:  # labels the operator mistyped
            self.rt.send_reply(msg.port, None, RAW_ERROR, ValueError(
                f"host {self.rt.hostname} ({self.rt.address}): {exc}"))
            return
        self.rt.send_reply(msg.port, None, OK, this)

    def tail(self, addr: str) -> list[str]:
        """The last lines a live proc printed (``tail_log_lines`` of them), output read so far
        and what is waiting in its pipes."""
        rec = self.procs.get(addr)
        if rec is None:
            return []
        for fd, stream in open_pipes(rec):
            self._read_once(rec, fd, stream)  # pick up lines still in the pipe
        n = int(config.get("tail_log_lines"))
        return list(rec.tail)[-n:] if n else []

    # -- output ----------------------------------------------------------------------------
    def _read_once(self, rec: ProcRecord, fd: int, stream: TextIO) -> bool:
        """Read what the pipe holds (up to 64 KiB) and pass its whole lines on; False when
        it held nothing (or ended). Read and written before the script's next line, whose
        write waits for the lock (``_output_fence``)."""
        with _output.held("stderr" if stream is sys.stderr else "stdout"):
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return False
            except OSError:
                data = b""
            if not data:
                self._close_pipe(rec, fd, stream)
                return False
            rec.read[fd] = rec.read.get(fd, 0) + len(data)
            data = rec.partial.pop(fd, b"") + data
            *lines, rest = data.split(b"\n")
            if rest:
                rec.partial[fd] = rest
            self._emit(rec, lines, stream, rec.read[fd])
            return True

    def _emit(self, rec: ProcRecord, lines: list[bytes], stream: TextIO, read: int = -1) -> None:
        """Keep, record and forward a proc's whole ``lines``; ``read``: the bytes read from
        its pipe so far, which a marked proc's controller is told even with no whole line
        (a line's start was read)."""
        kind = "stderr" if stream is sys.stderr else "stdout"
        text = [ln.decode("utf-8", "replace") for ln in lines]
        if text:
            rec.tail.extend(text)
            _proclog.write(rec.addr, kind, text)  # everything, whatever the terminal shows
            if self.rt.observer is not None:  # recording (regency._observe)
                self.rt.observer.lines(rec.addr, rec.label, kind, text)
        if not config.get("enable_log_forwarding"):
            return
        stamp = read if rec.marked else -1
        if self.forward_to:  # a worker: the lines belong at the controller's terminal
            if (text or stamp >= 0) and not self.muted(rec):
                self.rt.send_sys(self.forward_to, ProcOutput(rec.label, kind, text, rec.addr,
                                                             stamp))
        elif text:
            write_lines(rec.label, kind, text)

    def _close_pipe(self, rec: ProcRecord, fd: int, stream: TextIO) -> None:
        self.rt.loop.remove_reader(fd)
        rest = rec.partial.pop(fd, b"")
        if rest:
            self._emit(rec, [rest], stream)
        os.close(fd)
        if fd in rec.pipes:
            rec.pipes.remove(fd)

    def starting(self, addr: str) -> bool:
        """Whether the proc at ``addr`` was spawned here and has not yet said it is ready
        (nor exited): connecting to it may take as long as its start does."""
        rec = self.procs.get(addr)
        return rec is not None and not rec.ready

    # -- endings ---------------------------------------------------------------------------
    def _on_exit(self, pid: int, status: int) -> None:
        rec = self.by_pid.pop(pid, None)
        if rec is not None:
            self._finish(rec, describe_status(status))

    def _finish(self, rec: ProcRecord, cause: str) -> None:
        self.procs.pop(rec.addr, None)
        for port in self._resolving.pop(rec.addr, []):
            self.rt.send_reply(port, None, RAW_ERROR, f"{rec.addr}: the proc {cause}")
        for fd, stream in open_pipes(rec):
            self._read_rest(rec, fd, stream)
        _proclog.close(rec.addr)
        for hook in self.exit_hooks:
            try:
                hook(rec)
            except Exception:  # noqa: BLE001 - a service's cleanup must not stop the report
                log.exception("regency: error in a proc-exit hook")
        if cause == "killed by signal SIGKILL" and not rec.killed and oom_kills(rec) > rec.ooms:
            cause += " (out of memory: the kernel's OOM killer ended it)"
        self.rt.mark_dead(rec.addr, f"proc {cause}")
        # asked to stop and it exited cleanly (or we killed it): expected; a crash while
        # draining its last messages is still a failure. A SIGTERM while stopping is a
        # stop too (SLURM signals every process of a job at once).
        clean = cause in ("exited with code 0", "killed by signal SIGTERM")
        expected = rec.killed or (rec.stopping and clean)
        if rec.ended_by:  # its owner did not ask: a failure there, saying why
            cause, expected = f"{rec.ended_by} (the proc {cause})", False
        self._notify_owner(rec, cause, expected=expected)
        self._check_stop_waiters(rec.addr)
        self._kill_orphans(rec.addr)

    def _kill_orphans(self, owner: str) -> None:
        """A proc's own procs die with it: a mesh never outlives its owner."""
        orphans = {r.addr for r in self.procs.values() if r.owner == owner}
        if orphans:
            self.kill(orphans)

    def _read_rest(self, rec: ProcRecord, fd: int, stream: TextIO) -> None:
        """Read the pipe dry (a grandchild may still hold it open: the reader stays)."""
        while fd in rec.pipes and self._read_once(rec, fd, stream):
            pass

    def _notify_owner(self, rec: ProcRecord, cause: str, expected: bool) -> None:
        n = int(config.get("tail_log_lines"))
        report = ProcExited(rec.addr, rec.pid, cause, expected, rec.mesh_uid, rec.rank,
                            self.rt.hostname, list(rec.tail)[-n:] if n else [], in_flight(rec))
        for keep in self.exit_reports:
            keep(rec, report)
        self.rt.send_sys(rec.owner, report)

    # -- stopping --------------------------------------------------------------------------
    def _on_stop_procs(self, msg: StopProcs) -> None:
        addrs = {a for a in msg.addrs if a in self.procs}
        port = msg.port
        for addr in addrs:
            rec = self.procs[addr]
            rec.stopping = True
            self.rt.send_sys(addr, StopProc(msg.reason))
        fut = self.rt.loop.create_future()
        self._stop_waiters.append((addrs, fut))
        timeout = float(config.get("stop_actor_timeout")) + float(config.get("cleanup_timeout"))
        self.track(self._await_stop(addrs, fut, timeout, port), "stop procs")

    def track(self, work: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None]:
        """Run ``work`` as a task that is kept until it ends and whose failure is logged
        (an exception in an untracked task is lost). Loop thread."""
        task = self.rt.loop.create_task(work, name=f"regency-host-{what.replace(' ', '-')}")
        self._tasks.add(task)

        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.error("regency: the host agent failed to %s", what,
                          exc_info=task.exception())

        task.add_done_callback(done)
        return task

    async def _await_stop(self, addrs: set[str], fut: asyncio.Future[None], timeout: float,
                          port: tuple[str, int] | None) -> None:
        if addrs:
            try:
                await asyncio.wait_for(asyncio.shield(fut), timeout)
            except asyncio.TimeoutError:
                self.kill(addrs)
                try:
                    await asyncio.wait_for(asyncio.shield(fut), SIGKILL_REAP_S)
                except asyncio.TimeoutError:
                    # not reaped (stuck in the kernel?): the stop is answered all the same
                    self._stop_waiters = [w for w in self._stop_waiters if w[1] is not fut]
                    log.warning("regency: procs %s were not reaped %.0f s after SIGKILL",
                                ", ".join(sorted(addrs)), SIGKILL_REAP_S)
        if port is not None:
            self.rt.send_reply(port, None, OK, None)

    def _check_stop_waiters(self, addr: str) -> None:
        for addrs, fut in list(self._stop_waiters):
            addrs.discard(addr)
            if not addrs:
                self._stop_waiters.remove((addrs, fut))
                if not fut.done():
                    fut.set_result(None)

    async def stop_all(self, why: str, timeout: float) -> None:
        """Stop every proc here on this host's own account (a worker's SIGTERM): their
        ``__cleanup__`` runs, those still there after ``timeout`` are killed, and each
        owner hears ``why`` as the cause. Procs already stopping (asked by their owner, or
        killed) end as they were going to."""
        addrs = {addr for addr, rec in self.procs.items() if not rec.stopping}
        if not addrs:
            return
        for addr in addrs:
            rec = self.procs[addr]
            rec.stopping, rec.ended_by = True, why
            self.rt.send_sys(addr, StopProc(why))
        fut = self.rt.loop.create_future()
        self._stop_waiters.append((addrs, fut))
        await self._await_stop(addrs, fut, timeout, None)

    def kill(self, addrs: set[str] | None = None) -> None:
        """SIGKILL the given procs (all when None); one still being forked is killed as
        soon as the fork server says it is there."""
        for rec in list(self.procs.values()):
            if addrs is None or rec.addr in addrs:
                rec.stopping = rec.killed = True
                if rec.pid:
                    signal_pid(rec.pid, signal.SIGKILL)

    def shutdown(self) -> None:
        """Kill every proc and the fork server (loop thread)."""
        self.kill()
        if self._sock is not None:
            self.rt.loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        if self._zygote is not None:
            _reap_zygote(self._zygote)
            self._zygote = None


def _reap_zygote(zygote: subprocess.Popen[bytes]) -> None:
    """Wait for a fork server told to end (its socket closed), killing it if it lingers
    (it ends what its procs left behind first: ``_descendants.END_ALL_S``)."""
    try:
        zygote.wait(timeout=END_ALL_S + 1.0)
    except subprocess.TimeoutExpired:
        zygote.kill()
        zygote.wait()
