"""Many hosts on one machine: workers and the controller each in a network namespace.

Every host is a real ``regency worker`` process in a namespace of its own (see ``_netns``),
reached over TCP across a bridge; the controller is a separate process in another namespace.
The controller runs this very file as a script (``python test_multihost.py controller``): it
reads commands as JSON lines on stdin and answers with JSON lines on stdout, so that the
test can act on the network (cut a link, stop a worker) while the controller has calls in
flight. Nothing here sleeps to synchronise: every wait polls with a deadline.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PORT = 26600
SECRET = "multihost-test-secret"
LOST = 3.0  # host_lost_timeout used by these tests (the default)
MARGIN = 2.5  # allowed on top of it for detection on a 2-core machine


# =========================================================================================
# The controller side (this file run as a script in the controller's namespace)
# =========================================================================================
def _controller_main() -> int:  # pragma: no cover - runs in a subprocess
    version = os.environ.get("RGT_FAKE_VERSION")
    if version:
        from regency._runtime import _router

        _router.VERSION = version
    import regency.actor as ra
    from regency.actor import Actor, current_rank, endpoint

    lock = threading.Lock()

    def emit(**kw: Any) -> None:
        with lock:
            sys.stdout.write(json.dumps({"mh": 1, **kw}, default=str) + "\n")
            sys.stdout.flush()

    def on_failure(failure: Any) -> None:
        emit(ev="unhandled", host=failure.host, cause=failure.cause, report=failure.report(),
             t=time.monotonic())

    ra.unhandled_fault_hook = on_failure

    class Probe(Actor):
        @endpoint
        def where(self) -> dict[str, Any]:
            from regency._runtime import _current

            return {"pid": os.getpid(), "rank": dict(current_rank()),
                    "addr": _current.get().address}

        @endpoint
        def echo(self, x: Any) -> Any:
            return x

        @endpoint
        def sleep(self, secs: float) -> float:
            time.sleep(secs)
            return secs

        @endpoint
        def relay(self, peers: Any, host: int) -> dict[str, Any]:
            """Call the actor with the same gpu index on ``host`` (actor to actor)."""
            gpu = dict(current_rank())["gpus"]  # called on one host's slice: {gpus: n}
            other = peers.slice(hosts=host, gpus=gpu)
            return {"me": os.getpid(), "peer": other.where.call_one().get(timeout=20)}

    st: dict[str, Any] = {}

    def op_attach(workers: list[str]) -> float:
        t0 = time.monotonic()
        st["hm"] = ra.attach_to_workers(workers)
        st["n"] = len(workers)
        return time.monotonic() - t0

    def op_spawn(gpus: int = 2) -> list[dict[str, Any]]:
        st["pm"] = st["hm"].spawn_procs(per_host={"gpus": gpus})
        st["a"] = st["pm"].spawn("probe", Probe)
        return op_where()

    def op_where() -> list[dict[str, Any]]:
        return [v for _, v in st["a"].where.call().get(timeout=30).items()]

    def op_relay() -> list[dict[str, Any]]:
        # one host at a time: all at once, each actor would wait on a busy one (a cycle)
        out = []
        for h in range(st["n"]):
            mesh = st["a"].slice(hosts=h)
            nxt = (h + 1) % st["n"]
            out += [v for _, v in mesh.relay.call(st["a"], nxt).get(timeout=30).items()]
        return out

    def op_host(host: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        mesh = st["a"].slice(hosts=host)
        return [v for _, v in mesh.where.call().get(timeout=timeout).items()]

    def op_echo_many(host: int, n: int, size: int) -> dict[str, float]:
        one = st["a"].slice(hosts=host, gpus=0)
        times = []
        for i in range(n):
            payload = bytes([i % 251]) * size
            t0 = time.monotonic()
            back = one.echo.call_one(payload).get(timeout=30)
            times.append(time.monotonic() - t0)
            assert back == payload, f"payload {i} came back corrupted"
        times.sort()
        return {"min": times[0], "p50": times[len(times) // 2], "max": times[-1]}

    def op_slow(host: int, secs: float) -> str:
        one = st["a"].slice(hosts=host, gpus=0)
        fut = one.sleep.call_one(secs)

        def wait() -> None:
            try:
                fut.get(timeout=secs + 60)
                emit(ev="slow_done", ok=True, t=time.monotonic())
            except Exception as exc:  # noqa: BLE001 - reported to the test
                emit(ev="slow_done", ok=False, err=type(exc).__name__, msg=str(exc),
                     host=getattr(exc, "host", ""), t=time.monotonic())

        threading.Thread(target=wait, daemon=True).start()
        return "started"

    def op_stop() -> float:
        t0 = time.monotonic()
        st["hm"].stop().get(timeout=60)
        return time.monotonic() - t0

    def op_shutdown() -> float:
        t0 = time.monotonic()
        st["hm"].shutdown().get(timeout=60)
        return time.monotonic() - t0

    def op_pid() -> int:
        return os.getpid()

    ops = {name[3:]: fn for name, fn in locals().items() if name.startswith("op_")}
    emit(ev="hello", pid=os.getpid())
    for line in sys.stdin:
        cmd = json.loads(line)
        op, seq = cmd.pop("op"), cmd.pop("seq")
        try:
            value = ops[op](**cmd)
            emit(ev="reply", seq=seq, ok=True, value=value)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            emit(ev="reply", seq=seq, ok=False, err=type(exc).__name__, msg=str(exc)[:3000])
    return 0


def _attack_main(addr: str, marker_dir: str, good_secret: str) -> int:  # pragma: no cover
    """Unauthenticated and wrong clients against a worker; each sends a pickle that would
    create a file in ``marker_dir`` if the worker ever unpickled it."""
    import hashlib
    import pickle
    import socket

    from regency._runtime._router import VERSION
    from regency._wire import ClientHandshake, encode_frame

    host, port = addr.rsplit(":", 1)
    host = host.split(":")[-1].lstrip("/")

    def evil(name: str) -> bytes:
        head = pickle.dumps(_Evil(os.path.join(marker_dir, name + "-envelope")))
        body = pickle.dumps(_Evil(os.path.join(marker_dir, name + "-body")))
        prefix, *bufs = encode_frame([head, body])
        return bytes(prefix) + b"".join(bytes(b) for b in bufs)

    def session(name: str, first: bytes, hs: ClientHandshake | None) -> dict[str, Any]:
        s = socket.create_connection((host, int(port)), timeout=5)
        got = b""
        error = None
        try:
            if hs is not None:
                s.sendall(hs.data_to_send())
                while not (hs.done or hs.failed):
                    data = s.recv(4096)
                    if not data:
                        break
                    got += data
                    hs.receive_data(data)
                    out = hs.data_to_send()
                    if out:
                        s.sendall(out)
                # a proof was sent (or refused): now push a frame as if we were in
                s.sendall(evil(name))
            else:
                s.sendall(first + evil(name))
            s.settimeout(3)
            while True:
                data = s.recv(4096)
                if not data:
                    break
                got += data
        except OSError as exc:  # reset by the worker: closed all the same
            error = str(exc)
        finally:
            s.close()
        return {"name": name, "closed": True, "error": error, "got": got.decode("latin-1"),
                "handshake_error": str(hs.error) if hs is not None and hs.error else None}

    def forged_proof(name: str) -> dict[str, Any]:
        """A client that ignores the server's proof and answers with a made-up one."""
        from regency._wire import _handshake as h

        s = socket.create_connection((host, int(port)), timeout=5)
        got = b""
        try:
            wire = f"{VERSION}+{h.HANDSHAKE}".encode()  # the version as the handshake sends it
            vf = bytes([len(wire)]) + wire
            s.sendall(h._message(h._HELLO, vf + os.urandom(32) + b"tcp:10.77.0.200:1"))
            while len(got) < 7 or len(got) < 7 + int.from_bytes(got[5:7], "big"):
                got += s.recv(4096)
            s.sendall(h._message(h._PROOF, os.urandom(32)) + evil(name))
            s.settimeout(3)
            while data := s.recv(4096):
                got += data
        except OSError:
            pass
        finally:
            s.close()
        return {"name": name, "closed": True, "got": got.decode("latin-1"),
                "handshake_error": None}

    wrong = hashlib.sha256(b"not-the-secret").digest()
    from regency._runtime._secret import _salt, derive_key

    good = derive_key(good_secret.encode(), _salt())
    results = [
        session("garbage", b"GET / HTTP/1.0\r\n\r\n", None),
        session("raw_frame", b"", None),
        session("wrong_secret", b"", ClientHandshake(wrong, VERSION, "tcp:10.77.0.200:1")),
        forged_proof("forged_proof"),
        session("other_version", b"", ClientHandshake(good, "regency-9.9", "tcp:10.77.0.200:1")),
    ]
    for r in results:
        print(json.dumps({"mh": 1, "ev": "attack", **r}), flush=True)
    return 0


class _Evil:
    """Unpickling this creates a file: proof that a payload was (or was not) unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1] == "controller":
        sys.exit(_controller_main())
    if sys.argv[1] == "attack":
        sys.exit(_attack_main(sys.argv[2], sys.argv[3], sys.argv[4]))
    raise SystemExit(f"unknown role {sys.argv[1]!r}")


# =========================================================================================
# The test side
# =========================================================================================
import psutil  # noqa: E402
import pytest  # noqa: E402
from _netns import (  # noqa: E402
    NetnsUnavailable,
    TestNet,
    loss_available,
    netns_problem,
    secret_env,
    test_network,
)

_why = netns_problem()
if _why is not None:
    print(f"SKIP tests/system/test_multihost.py: {_why}", file=sys.stderr)
pytestmark = [
    pytest.mark.skipif(_why is not None, reason=f"network namespaces unavailable: {_why}"),
    pytest.mark.timeout(90),
]


def wait_for(pred: Any, timeout: float, what: str, interval: float = 0.02) -> Any:
    """Poll ``pred`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Worker:
    """One ``regency worker`` process in a host namespace, with its output in a log file."""

    def __init__(self, net: TestNet, index: int, log: Path, env: dict[str, str]) -> None:
        self.net = net
        self.index = index
        self.node = net.hosts[index]
        self.addr = f"tcp://{self.node.ip}:{PORT}"
        self.log = log
        self.mark = 0  # text() shows the log from here on
        with open(log, "wb") as out:
            self.proc = net.popen(index, [sys.executable, "-m", "regency", "worker", "--listen",
                                          self.addr], stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env)

    def text(self) -> str:
        """What it printed since the current test took it."""
        return self.log.read_bytes()[self.mark:].decode(errors="replace")

    def reusable(self, timeout: float = 5.0) -> bool:
        """Alive, running, no procs, and detached from every controller it served."""
        if self.proc.poll() is not None:
            return False
        try:
            if psutil.Process(self.proc.pid).status() == psutil.STATUS_STOPPED:
                return False
        except psutil.NoSuchProcess:
            return False
        try:
            wait_for(self._idle, timeout, "worker to be idle")
        except AssertionError:
            return False
        return True

    def _idle(self) -> bool:
        log = self.log.read_text(errors="replace")
        detached = log.count("serving controller") <= log.count("ready for the next")
        return detached and not self.procs()

    def wait_listening(self, timeout: float = 20.0) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker {self.index} exited early:\n{self.text()}")
            return "listening on" in self.text()

        wait_for(ready, timeout, f"worker {self.index} to listen")

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def procs(self) -> list[psutil.Process]:
        """Its procs: descendants other than the fork server."""
        out = []
        for p in self.descendants():
            try:
                if p.ppid() != self.proc.pid:  # the zygote is the direct child
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        for p in self.descendants():
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait(timeout=10)


class Controller:
    """The controller process (this file as a script) in the controller namespace."""

    def __init__(self, net: TestNet, log: Path, env: dict[str, str]) -> None:
        self.log = log
        self._err = open(log, "wb")  # noqa: SIM115 - closed in close()
        self.proc = net.popen("ctl", [sys.executable, str(Path(__file__)), "controller"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                              env=env, text=True, bufsize=1)
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.events: list[dict[str, Any]] = []
        self.attached: list[str] = []
        self.shut_down = False  # the workers it attached were told to exit
        self._seq = 0
        threading.Thread(target=self._read, daemon=True).start()
        hello = self.event("hello", 30)
        self.pid = hello["pid"]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith('{"mh"'):
                self.lines.put(json.loads(line))
        self.lines.put({"ev": "eof"})

    def _next(self, deadline: float, what: str) -> dict[str, Any]:
        try:
            msg = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"controller: no {what} in time; its stderr:\n"
                                 f"{self.stderr()}") from None
        if msg["ev"] == "eof":
            self.lines.put(msg)
            raise AssertionError(f"controller exited ({self.proc.poll()}) while waiting for "
                                 f"{what}; its stderr:\n{self.stderr()}")
        return msg

    def event(self, ev: str, timeout: float) -> dict[str, Any]:
        """The next event named ``ev`` (earlier ones included)."""
        deadline = time.monotonic() + timeout
        for i, msg in enumerate(self.events):
            if msg["ev"] == ev:
                return self.events.pop(i)
        while True:
            msg = self._next(deadline, f"event {ev!r}")
            if msg["ev"] == ev:
                return msg
            self.events.append(msg)

    def ask(self, op: str, timeout: float = 30.0, **kw: Any) -> dict[str, Any]:
        """Run ``op`` in the controller; returns its reply (``ok``, ``value`` or ``err``)."""
        return self.reply(self.send(op, **kw), op, timeout)

    def send(self, op: str, **kw: Any) -> int:
        """Start ``op`` in the controller; :meth:`reply` waits for its answer."""
        self._seq += 1
        if op == "attach":
            self.attached = list(kw["workers"])
        elif op == "shutdown":
            self.shut_down = True
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "seq": self._seq, **kw}) + "\n")
        self.proc.stdin.flush()
        return self._seq

    def reply(self, seq: int, op: str = "op", timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for i, msg in enumerate(self.events):
            if msg["ev"] == "reply" and msg["seq"] == seq:
                return self.events.pop(i)
        while True:
            msg = self._next(deadline, f"reply to {op}")
            if msg["ev"] == "reply" and msg["seq"] == seq:
                return msg
            self.events.append(msg)

    def ok(self, op: str, timeout: float = 30.0, **kw: Any) -> Any:
        reply = self.ask(op, timeout, **kw)
        assert reply["ok"], f"{op} failed: {reply['err']}: {reply['msg']}\n{self.stderr()}"
        return reply["value"]

    def stderr(self) -> str:
        self._err.flush()
        return self.log.read_text(errors="replace")[-6000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._err.close()


@pytest.fixture(scope="module")
def net() -> Iterator[TestNet]:
    try:
        with test_network(3) as n:
            yield n
    except NetnsUnavailable as exc:  # pragma: no cover - probed above
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def pool(net: TestNet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerPool]:
    p = WorkerPool(net, tmp_path_factory.mktemp("workers"))
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def cluster(net: TestNet, pool: WorkerPool, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(net, pool, tmp_path)
    try:
        yield c
    finally:
        c.close()


class WorkerPool:
    """Workers kept between tests while they are healthy and idle (starting one takes ~1 s)."""

    def __init__(self, net: TestNet, logs: Path) -> None:
        self.net = net
        self.logs = logs
        self.idle: dict[int, Worker] = {}
        self.started = 0

    def take(self, i: int, fresh: bool = False) -> Worker:
        w = self.idle.pop(i, None)
        if w is None or fresh:
            if w is not None:
                w.stop()
            self.started += 1
            log = self.logs / f"worker{i}-{self.started}.log"
            w = Worker(self.net, i, log, secret_env(SECRET))
            w.wait_listening()
        w.mark = w.log.stat().st_size
        return w

    def give_back(self, w: Worker) -> None:
        if w.reusable():
            self.idle[w.index] = w
        else:
            w.stop()

    def close(self) -> None:
        for w in self.idle.values():
            w.stop()
        self.idle.clear()


class Cluster:
    """Three workers (fresh or idle ones) and the controllers of one test; undone at the end."""

    def __init__(self, net: TestNet, pool: WorkerPool, tmp: Path) -> None:
        self.net = net
        self.pool = pool
        self.tmp = tmp
        self.controllers: list[Controller] = []
        self.workers = [pool.take(i) for i in range(3)]

    @property
    def addrs(self) -> list[str]:
        return [w.addr for w in self.workers]

    def controller(self, **env: str) -> Controller:
        log = self.tmp / f"controller{len(self.controllers)}.log"
        c = Controller(self.net, log, secret_env(SECRET, **env))
        self.controllers.append(c)
        return c

    def restart_worker(self, i: int) -> Worker:
        self.workers[i].stop()
        self.workers[i] = self.pool.take(i, fresh=True)
        return self.workers[i]

    def close(self) -> None:
        for node in self.net.nodes:
            if node.is_cut:
                self.net.restore(node)
            self.net.clear_impairment(node)
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGCONT)
        exiting = set()
        for c in self.controllers:
            if c.shut_down:
                exiting.update(c.attached)
            if c.proc.poll() is None:
                c.proc.kill()
            c.close()
        for w in self.workers:
            if w.addr in exiting:  # it may still be on its way out: never reuse it
                w.stop()
            else:
                self.pool.give_back(w)


def _host_of(pid: int, cluster: Cluster) -> int:
    """Which worker a proc's pid descends from."""
    for i, w in enumerate(cluster.workers):
        if any(p.pid == pid for p in w.descendants()):
            return i
    raise AssertionError(f"pid {pid} is no worker's descendant")


# -- the happy path ------------------------------------------------------------------------------
def test_three_hosts_spawn_call_cross_host_and_shutdown(cluster: Cluster) -> None:
    ctl = cluster.controller()
    ctl.ok("attach", workers=cluster.addrs)
    where = ctl.ok("spawn", gpus=2)
    assert sorted((w["rank"]["hosts"], w["rank"]["gpus"]) for w in where) == [
        (h, g) for h in range(3) for g in range(2)]
    for w in where:  # every proc runs under the worker of its host, reached over the bridge
        assert _host_of(w["pid"], cluster) == w["rank"]["hosts"]
        assert cluster.net.hosts[w["rank"]["hosts"]].ip in w["addr"]
    pid_at = {(w["rank"]["hosts"], w["rank"]["gpus"]): w["pid"] for w in where}
    relayed = ctl.ok("relay")
    assert len(relayed) == 6
    for r in relayed:
        peer = r["peer"]
        assert peer["rank"] == {}  # a one-member slice has no dimensions left
        me = next(k for k, v in pid_at.items() if v == r["me"])
        assert peer["pid"] == pid_at[((me[0] + 1) % 3, me[1])]
    took = ctl.ok("shutdown")
    assert took < 10
    for w in cluster.workers:
        assert w.proc.wait(timeout=15) == 0, w.text()
        assert not w.descendants()


def test_stop_releases_workers_for_the_next_controller(cluster: Cluster) -> None:
    first = cluster.controller()
    first.ok("attach", workers=cluster.addrs)
    first.ok("spawn", gpus=1)
    first.ok("stop")
    wait_for(lambda: all(not w.procs() for w in cluster.workers), 10, "procs to end on stop")
    second = cluster.controller()
    second.ok("attach", workers=cluster.addrs)
    assert len(second.ok("spawn", gpus=1)) == 3
    second.ok("stop")
    wait_for(lambda: all(not w.procs() for w in cluster.workers), 10, "procs to end on stop")
    assert all(w.proc.poll() is None for w in cluster.workers)


# -- security -------------------------------------------------------------------------------------
def test_unauthenticated_wrong_secret_and_other_version_are_refused(
        cluster: Cluster, tmp_path: Path) -> None:
    marker_dir = tmp_path / "markers"
    marker_dir.mkdir()
    # positive control: the payload does create its file when unpickled
    import pickle

    probe = pickle.loads(pickle.dumps(_Evil(str(marker_dir / "control"))))
    probe.close()
    assert (marker_dir / "control").exists()
    (marker_dir / "control").unlink()

    w = cluster.workers[0]
    res = cluster.net.run("ctl", [sys.executable, str(Path(__file__)), "attack", w.addr,
                                  str(marker_dir), SECRET], env=secret_env(SECRET))
    assert res.returncode == 0, res.stderr
    attacks = {a["name"]: a for a in map(json.loads, res.stdout.splitlines())}
    assert set(attacks) == {"garbage", "raw_frame", "wrong_secret", "forged_proof",
                            "other_version"}
    assert all(a["closed"] for a in attacks.values())
    assert "bad magic" in attacks["garbage"]["got"]  # the worker says why, then closes
    assert "version mismatch" in (attacks["other_version"]["handshake_error"] or "")
    assert "authentication failed" in (attacks["wrong_secret"]["handshake_error"] or "")

    def refusals() -> list[str]:
        return [ln for ln in w.text().splitlines() if "refused a connection" in ln]

    lines = wait_for(lambda: len(refusals()) >= 5 and refusals(), 10, "5 refusal log lines")
    text = "\n".join(lines)
    assert text.count("bad magic") == 2, text
    assert text.count("authentication failed") == 2, text  # wrong secret, forged proof
    assert "version mismatch" in text and "regency-9.9" in text
    assert list(marker_dir.iterdir()) == [], "an unauthenticated payload was unpickled"
    assert w.proc.poll() is None

    # a controller with the wrong secret, and one of another version, cannot attach ...
    bad = [(cluster.controller(**env), expect)
           for env, expect in (({"REGENCY_SECRET": "wrong"}, "authentication failed"),
                               ({"RGT_FAKE_VERSION": "regency-9.9"}, "version mismatch"))]
    asked = [(c, c.send("attach", workers=[w.addr]), expect) for c, expect in bad]
    for c, seq, expect in asked:
        reply = c.reply(seq, "attach", timeout=30)
        assert not reply["ok"]
        assert reply["err"] in ("TransportError", "AuthenticationError"), reply
        assert expect in reply["msg"], reply["msg"]
        c.close()
    # ... and the worker still serves a correct controller afterwards
    good = cluster.controller()
    good.ok("attach", workers=[w.addr])
    assert len(good.ok("spawn", gpus=1)) == 1
    good.ok("stop")
    assert list(marker_dir.iterdir()) == []


def test_plain_worker_logs_refused_connections(cluster: Cluster) -> None:
    """Regression: the worker command used to configure no logging, so it printed nothing."""
    w = cluster.workers[0]
    res = cluster.net.run("ctl", [sys.executable, "-c", (
        "import socket, sys; s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 5); "
        "s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); s.settimeout(5); s.recv(100)"),
        w.node.ip, str(PORT)])
    assert res.returncode == 0, res.stderr
    wait_for(lambda: "refused" in w.text(), 3, "a log line about the refused connection")


def test_refused_attach_fails_fast(cluster: Cluster) -> None:
    """Regression: a refused attach used to wait out connect_timeout (30 s) before failing."""
    bad = cluster.controller(REGENCY_SECRET="wrong")
    t0 = time.monotonic()
    reply = bad.ask("attach", timeout=30, workers=[cluster.addrs[0]])
    took = time.monotonic() - t0
    assert not reply["ok"]
    assert "authentication failed" in reply["msg"]
    assert took < 3, f"a refused attach took {took:.1f}s to fail"


def test_a_busy_worker_refuses_a_second_controller(cluster: Cluster) -> None:
    first = cluster.controller()
    first.ok("attach", workers=cluster.addrs)
    first.ok("spawn", gpus=1)
    second = cluster.controller()
    reply = second.ask("attach", timeout=40, workers=[cluster.addrs[1]])
    assert not reply["ok"]
    assert "busy" in reply["msg"] and cluster.workers[1].node.ip in reply["msg"], reply
    assert len(first.ok("where")) == 3  # the first controller is not disturbed
    first.ok("stop")


# -- liveness -----------------------------------------------------------------------------------
def _expect_host_lost(ctl: Controller, t_fault: float, host_ip: str) -> dict[str, Any]:
    done = ctl.event("slow_done", LOST + MARGIN + 5)
    assert not done["ok"], done
    assert done["err"] == "SupervisionError", done
    took = done["t"] - t_fault
    assert took < LOST + MARGIN, f"detected after {took:.2f}s"
    unhandled = ctl.event("unhandled", 5)
    assert host_ip in unhandled["host"] or host_ip in unhandled["report"], unhandled
    return done


def test_cut_link_fails_pending_call_others_keep_working(cluster: Cluster) -> None:
    ctl = cluster.controller()
    ctl.ok("attach", workers=cluster.addrs)
    ctl.ok("spawn", gpus=2)
    assert ctl.ok("slow", host=1, secs=60) == "started"
    t_cut = time.monotonic()
    cluster.net.cut(1)
    _expect_host_lost(ctl, t_cut, cluster.workers[1].node.ip)
    for h in (0, 2):
        assert len(ctl.ok("host", host=h)) == 2
    # the worker behind the cut link notices its controller is gone and kills its procs
    wait_for(lambda: not cluster.workers[1].procs(), LOST + 5, "the cut-off worker's procs to die")
    assert "missed its heartbeats" in cluster.workers[1].text()
    # (shutdown after a lost host: test_shutdown_after_a_host_is_lost_is_prompt)
    ctl.proc.kill()
    for i in (0, 2):
        wait_for(lambda i=i: not cluster.workers[i].procs(), 5, f"worker {i}'s procs to die")


def test_shutdown_after_a_host_is_lost_is_prompt(cluster: Cluster) -> None:
    """Regression: release used to wait 10 s for the lost worker to answer."""
    ctl = cluster.controller()
    ctl.ok("attach", workers=cluster.addrs)
    ctl.ok("spawn", gpus=1)
    ctl.ok("slow", host=1, secs=60)
    t_cut = time.monotonic()
    cluster.net.cut(1)
    _expect_host_lost(ctl, t_cut, cluster.workers[1].node.ip)
    took = ctl.ok("shutdown", timeout=30)
    assert took < 3, f"shutdown took {took:.1f}s: it waited on the lost host"


def test_lost_host_detection_takes_the_configured_timeout(cluster: Cluster) -> None:
    """With heartbeats every 0.2 s and a 1 s limit, a cut host fails calls within ~1.2 s."""
    period, limit = 0.2, 1.0
    ctl = cluster.controller(REGENCY_HEARTBEAT_INTERVAL=str(period),
                             REGENCY_HOST_LOST_TIMEOUT=str(limit))
    ctl.ok("attach", workers=cluster.addrs[:2])
    ctl.ok("spawn", gpus=1)
    ctl.ok("slow", host=1, secs=60)
    t_cut = time.monotonic()
    cluster.net.cut(1)
    done = ctl.event("slow_done", 10)
    assert done["err"] == "SupervisionError", done
    took = done["t"] - t_cut
    assert took < limit + period + 0.4, f"detected after {took:.2f}s"


def test_sigstop_worker_is_detected(cluster: Cluster) -> None:
    ctl = cluster.controller()
    ctl.ok("attach", workers=cluster.addrs)
    ctl.ok("spawn", gpus=1)
    ctl.ok("slow", host=2, secs=60)
    t_stop = time.monotonic()
    cluster.workers[2].proc.send_signal(signal.SIGSTOP)
    _expect_host_lost(ctl, t_stop, cluster.workers[2].node.ip)
    assert len(ctl.ok("host", host=0)) == 1
    cluster.workers[2].proc.send_signal(signal.SIGCONT)
    wait_for(lambda: not cluster.workers[2].procs(), 10, "the resumed worker to drop its procs")


def test_sigkilled_worker_fails_calls_at_once(cluster: Cluster) -> None:
    """A worker that dies (and its procs with it) resets its connections: no heartbeat wait."""
    ctl = cluster.controller()
    ctl.ok("attach", workers=cluster.addrs)
    ctl.ok("spawn", gpus=1)
    ctl.ok("slow", host=2, secs=60)
    t_kill = time.monotonic()
    victims = [cluster.workers[2].proc.pid] + [p.pid for p in cluster.workers[2].descendants()]
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    done = ctl.event("slow_done", LOST + 5)
    assert done["err"] == "SupervisionError", done
    assert done["t"] - t_kill < LOST, f"took {done['t'] - t_kill:.2f}s: waited for heartbeats"
    assert len(ctl.ok("host", host=0)) == 1
    ctl.ok("stop", timeout=20)


@pytest.mark.skipif(not loss_available(), reason="packets cannot be delayed or dropped here")
def test_delay_and_loss_calls_still_complete(cluster: Cluster) -> None:
    ctl = cluster.controller()
    ctl.ok("attach", workers=cluster.addrs)
    ctl.ok("spawn", gpus=1)
    delay = 0.050
    applied = cluster.net.impair(0, delay_ms=delay * 1000, loss_pct=5)
    print("impairment applied:", applied)
    stats = ctl.ok("echo_many", timeout=60, host=0, n=60, size=20000)
    dropped = cluster.net.dropped(0)
    print(f"round trips {stats}; {dropped} packets dropped")
    assert stats["min"] >= 0.9 * delay, f"the delay was not applied: {stats}"
    assert dropped > 0, "the impairment dropped nothing: the test would prove nothing"
    assert len(ctl.ok("host", host=0, timeout=20)) == 1
    assert not ctl.events or all(e["ev"] != "unhandled" for e in ctl.events), ctl.events
    cluster.net.clear_impairment(0)
    ctl.ok("stop")


@pytest.mark.skipif(not loss_available(), reason="packets cannot be delayed here")
def test_long_delay_is_not_a_lost_host(cluster: Cluster) -> None:
    """400 ms more round trip, well under host_lost_timeout: late heartbeats are not missed
    ones, so no host is declared lost, a call longer than the timeout completes, and the
    other hosts answer at their usual speed."""
    ctl = cluster.controller()
    ctl.ok("attach", workers=cluster.addrs)
    ctl.ok("spawn", gpus=1)
    delay = 0.400
    print("impairment applied:", cluster.net.impair(0, delay_ms=delay * 1000))
    stats = ctl.ok("echo_many", timeout=30, host=0, n=4, size=1000)
    print(f"round trips to the delayed host {stats}")
    assert stats["min"] >= 0.9 * delay, f"the delay was not applied: {stats}"
    assert ctl.ok("slow", host=0, secs=LOST + 0.5) == "started"
    others = ctl.ok("echo_many", timeout=30, host=1, n=10, size=1000)
    print(f"round trips to another host meanwhile {others}")
    assert others["p50"] < delay / 2, others
    done = ctl.event("slow_done", LOST + 10)
    assert done["ok"], done
    assert not ctl.events or all(e["ev"] != "unhandled" for e in ctl.events), ctl.events
    assert "missed its heartbeats" not in cluster.workers[0].text()
    cluster.net.clear_impairment(0)
    ctl.ok("stop")


def test_sigkilled_controller_worker_kills_procs_and_takes_next(cluster: Cluster) -> None:
    ctl = cluster.controller()
    ctl.ok("attach", workers=cluster.addrs)
    ctl.ok("spawn", gpus=2)
    assert all(len(w.procs()) == 2 for w in cluster.workers)
    ctl.proc.send_signal(signal.SIGKILL)
    ctl.proc.wait(timeout=5)
    for w in cluster.workers:
        wait_for(lambda w=w: not w.procs(), 5, f"worker {w.index}'s procs to be killed")
        assert w.proc.poll() is None
    nxt = cluster.controller()
    nxt.ok("attach", workers=cluster.addrs)
    assert len(nxt.ok("spawn", gpus=1)) == 3
    nxt.ok("stop")


def test_controller_cut_off_worker_lease_lapses(cluster: Cluster) -> None:
    """The controller's link is cut (no reset reaches the workers): their leases lapse."""
    ctl = cluster.controller()
    ctl.ok("attach", workers=cluster.addrs)
    ctl.ok("spawn", gpus=1)
    t_cut = time.monotonic()
    cluster.net.cut("ctl")
    for w in cluster.workers:
        wait_for(lambda w=w: not w.procs(), LOST + 5, f"worker {w.index}'s procs to be killed")
    assert time.monotonic() - t_cut < LOST + 5
    cluster.net.restore("ctl")
    nxt = cluster.controller()
    nxt.ok("attach", workers=cluster.addrs)
    assert len(nxt.ok("spawn", gpus=1)) == 3
    nxt.ok("stop")
