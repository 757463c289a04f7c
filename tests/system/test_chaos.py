"""The chaos tier (issue 19): a real worker attacked the way a hostile peer or an unlucky
operator would, then a good controller that must still get in.

Every attack is bounded in count and in time, on loopback only; every wait is on a line the
worker logs (or a process ending), never a sleep. Figures are printed (``-s`` shows them) and
recorded in docs/hardening.md.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from _chaos import SECRET, SPAWN_OUT_OF_FDS, Script, Worker, env, run_controller

from regency._dataplane import _proto
from regency._dataplane._sockets import connect as data_connect
from regency._runtime._router import VERSION
from regency._runtime._secret import configured_secret
from regency._transport import connect
from regency._wire import encode_frame, system_header

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        w.stop()


def _open(worker: Worker, count: int, first: bytes = b"") -> list[socket.socket]:
    """``count`` connections to the worker (each sends ``first``, then nothing more)."""
    out = []
    for _ in range(count):
        s = socket.create_connection((worker.host, worker.port), timeout=5)
        if first:
            s.sendall(first)
        out.append(s)
    return out


def test_fd_exhaustion_then_release_accepts_again(workers: list[Worker]) -> None:
    """Past RLIMIT_NOFILE the worker pauses accepting (one line), and accepts again once
    descriptors are free: a good controller attaches and calls an actor."""
    w = Worker(nofile=64)
    workers.append(w)
    start = len(w.lines)
    idle = _open(w, 120)  # more than the worker's 64 descriptors
    line = w.wait_for(lambda ln: "cannot accept a connection" in ln, 30, start)
    assert "Too many open files" in line
    released = time.monotonic()
    for s in idle:
        s.close()
    w.wait_for(lambda ln: "accepts again" in ln, 30, start)
    recovered = time.monotonic() - released
    report = run_controller(w)
    assert report["ok"], report
    assert w.proc.poll() is None
    assert w.count("cannot accept a connection") == 1  # once per episode
    refused = w.count("refused a connection")
    assert refused <= 12  # rate-limited: a burst of 10 per 10 s, not one per connection
    print(f"\nfd exhaustion: accepting again {recovered * 1000:.0f} ms after release, "
          f"controller attach {report['attach_s']:.2f} s, call {report['call_s']:.2f} s, "
          f"worker fds now {w.fds()}, {refused} refusal lines for 120 connections")


def test_spawning_on_a_worker_out_of_descriptors_says_so(workers: list[Worker]) -> None:
    """A spawn on a worker at its RLIMIT_NOFILE fails naming the cause (EMFILE, the limit,
    what to do), not "no such proc on this host"; once descriptors are free it works."""
    w = Worker(nofile=64)
    workers.append(w)
    s = Script(SPAWN_OUT_OF_FDS, w.address)
    try:
        s.next()
        start = len(w.lines)
        attached = w.fds()  # the controller attached: what the worker holds at rest
        idle = _open(w, 120)
        w.wait_for(lambda ln: "cannot accept a connection" in ln, 30, start)
        s.go_on()
        exhausted = s.next()
        for sock in idle:
            sock.close()
        w.wait_for(lambda ln: "accepts again" in ln, 30, start)
        w.wait_fds(attached + 8, 30)  # the backlog's connections closed as well
        s.go_on()
        released = s.next()
        s.finish()
    finally:
        s.kill()
    said = exhausted["error"] + "".join(exhausted["failures"])
    assert "no such proc" not in said, said
    assert "EMFILE" in said and "out of file descriptors" in said, said
    assert "RLIMIT_NOFILE soft 64" in said and "ulimit -n" in said, said
    assert released["outcome"] == "ok: hi", released
    print(f"\nspawn out of descriptors: {exhausted['error'][:400]}")


def test_slowloris_does_not_lock_out_a_good_controller(workers: list[Worker]) -> None:
    """Hundreds of stalled half-handshakes from one address: the oldest are closed to make
    room, and a good controller from the same address attaches at once (the handshake
    deadline is set to a minute, so it is not what lets it in)."""
    w = Worker(REGENCY_HANDSHAKE_TIMEOUT="60")
    workers.append(w)
    start = len(w.lines)
    stalled = _open(w, 300, first=b"RGHS")  # a handshake magic, then silence
    try:
        w.wait_for(lambda ln: "too many connections in their handshake" in ln, 30, start)
        fds_during = w.fds()
        report = run_controller(w)
        assert report["ok"], report
        assert report["attach_s"] < 30
        assert fds_during < 64 + 40  # the pending handshakes are bounded (64 per source)
        alive = 0
        for s in stalled:
            s.setblocking(False)
            try:
                alive += s.recv(1) != b""
            except BlockingIOError:
                alive += 1
            except OSError:
                pass
        assert alive <= 64
    finally:
        for s in stalled:
            s.close()
    print(f"\nslowloris: 300 stalled handshakes, worker fds {fds_during}, {alive} still open, "
          f"controller attach {report['attach_s']:.2f} s, call {report['call_s']:.2f} s")


DATA_SERVER = r"""
import logging, resource, sys
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
from regency._dataplane._registry import Registry
from regency._dataplane._server import DataServer
from regency._runtime._secret import configured_secret
srv = DataServer(configured_secret(), Registry(), job="chaos", tcp_host="127.0.0.1")
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (48, hard))
print("serving", srv.tcp, flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def test_data_plane_listener_survives_fd_exhaustion(monkeypatch: pytest.MonkeyPatch) -> None:
    """The data-plane server's accept thread backs off on EMFILE too, and serves again."""
    proc = subprocess.Popen([sys.executable, "-c", DATA_SERVER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env())
    assert proc.stdout is not None and proc.stdin is not None
    try:
        first = proc.stdout.readline()
        assert first.startswith("serving tcp:"), first
        host, port = first.split()[1][4:].rsplit(":", 1)
        idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(80)]
        for line in proc.stdout:  # its log, line by line, until the pause is reported
            if "cannot accept a connection" in line:
                break
        assert "Too many open files" in line
        for s in idle:
            s.close()
        monkeypatch.setenv("REGENCY_SECRET", SECRET)
        secret = configured_secret()
        assert secret is not None
        t0 = time.monotonic()
        sock = data_connect(first.split()[1], secret, _proto.VERSION, "chaos", timeout=10)
        took = time.monotonic() - t0
        sock.sendall(_proto.REQUEST.pack(_proto.MAGIC, _proto.CHECK, 1, 1, 0, 0))
        status = sock.recv(_proto.REPLY.size, socket.MSG_WAITALL)
        assert _proto.REPLY.unpack(status)[0] == _proto.DROPPED  # no such buffer: but served
        sock.close()
        print(f"\ndata plane: a good client served {took * 1000:.0f} ms after release")
    finally:
        proc.stdin.close()
        proc.wait(10)


def _authenticated(worker: Worker, monkeypatch: pytest.MonkeyPatch) -> socket.socket:
    """A connection to the worker that passed the handshake (a blocking socket)."""
    monkeypatch.setenv("REGENCY_SECRET", SECRET)
    secret = configured_secret()
    assert secret is not None
    sock, rest, _ = asyncio.run(connect(worker.address, secret, VERSION, "tcp:127.0.0.1:9"))
    assert rest == b""
    sock.setblocking(True)
    sock.settimeout(30)
    return sock


def _closed_by_peer(sock: socket.socket) -> bool:
    """Waits (bounded by the socket's timeout) for the peer to close ``sock``."""
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return True


def test_huge_declared_frames_do_not_pin_memory(
    workers: list[Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Authenticated peers that declare 256 MiB frames, send 64 KiB of them and close: the
    worker commits memory only for the bytes that arrived."""
    w = Worker()
    workers.append(w)
    run_controller(w)  # the worker's memory after serving one controller is the baseline
    before = w.rss_kib()
    for _ in range(8):
        sock = _authenticated(w, monkeypatch)
        prefix = struct.pack("!2sBxI2Q", b"RG", 1, 2, 16, 256 << 20)
        sock.sendall(prefix + b"h" * 16 + b"x" * 65536)
        sock.close()
    report = run_controller(w)  # the worker read and dropped them before serving this one
    assert report["ok"]
    after = w.rss_kib()
    grown = (after - before) / 1024
    print(f"\n8 x 256 MiB declared frames: worker RSS {before / 1024:.0f} -> "
          f"{after / 1024:.0f} MiB")
    assert grown < 16, f"RSS grew by {grown:.0f} MiB"


def test_garbage_after_authentication_closes_only_that_connection(
    workers: list[Worker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Undecodable frames from authenticated peers (bad pickle, unknown kind, a system
    message that does not unpickle): each such connection is closed at its first one; the
    others live on, and the worker's log stays short."""
    w = Worker()
    workers.append(w)
    good = _authenticated(w, monkeypatch)
    garbage = [
        [b"\x80\x05not a pickle"],
        [pickle.dumps((999, "no such kind"))],
        [pickle.dumps(("not", "a", "tag"))],
        [system_header("spawn_procs"), b"\x80\x05garbage payload"],
    ]
    start = len(w.lines)
    t0 = time.monotonic()
    closed = 0
    for i in range(60):  # bounded: 60 connections, one garbage frame each
        sock = _authenticated(w, monkeypatch)
        sock.sendall(b"".join(bytes(b) for b in encode_frame(garbage[i % len(garbage)])))
        closed += _closed_by_peer(sock)
        sock.close()
    detect_ms = (time.monotonic() - t0) * 1000 / 60
    good.setblocking(False)
    try:
        alive = good.recv(1) != b""
    except BlockingIOError:
        alive = True
    good.close()
    assert alive, "the well-behaved connection was closed too"
    report = run_controller(w)
    assert report["ok"]
    lines = w.lines[start:]
    closing = sum("closing connection" in ln for ln in lines)
    tracebacks = sum("Traceback" in ln for ln in lines)
    print(f"\n60 garbage connections: each closed in {detect_ms:.1f} ms (handshake "
          f"included), {closing} closing lines, {len(lines)} worker lines in all")
    assert closed == 60
    assert tracebacks == 0
    assert closing <= 12
    assert len(lines) < 40


def test_a_wrong_secret_learns_nothing_testable_offline(workers: list[Worker]) -> None:
    """A client guessing the secret gets the worker's challenge (nonce, version) and then a
    refusal: no value keyed by the real secret. ``connect`` names the failure."""
    from regency._wire import ClientHandshake
    from regency._wire._handshake import AUTH_FAILED, HANDSHAKE
    from regency.errors import AuthenticationError

    w = Worker()
    workers.append(w)
    guess = ClientHandshake(b"winter2026", VERSION, "tcp://evil:1")
    sock = socket.create_connection((w.host, w.port), timeout=30)
    sock.sendall(guess.data_to_send())
    received = bytearray()
    while not guess.failed:
        data = sock.recv(4096)
        if not data:
            break
        received += data
        guess.receive_data(data)
        sock.sendall(guess.data_to_send())  # its proof, keyed by the guess
    while data:
        data = sock.recv(4096)
        received += data
    sock.close()
    version = f"{VERSION}+{HANDSHAKE}".encode()
    challenge_len = 7 + 32 + 1 + len(version)
    assert received[4] == 2 and received[challenge_len - len(version):challenge_len] == version
    rest = bytes(received[challenge_len:])
    assert rest[4] == 5 and rest.endswith(AUTH_FAILED.encode())  # REJECT, and nothing else
    assert str(guess.error) == AUTH_FAILED
    with pytest.raises(AuthenticationError, match="does not know the job secret"):
        asyncio.run(connect(w.address, b"a wrong key", VERSION, "tcp://x:1"))
