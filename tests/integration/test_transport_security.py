"""Connections are authenticated before any payload byte is read; hostile input is contained.

These run two real routers on real sockets (unix and tcp) in one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from regency._runtime._router import Router
from regency._wire import new_secret

pytestmark = pytest.mark.timeout(30)


class Endpoint:
    """A router plus what it received."""

    def __init__(self, secret: bytes) -> None:
        self.frames: list[list[bytes]] = []
        self.lost: list[str] = []
        self.undeliverable: list[str] = []
        self.router = Router(secret, self._frame, self._lost, self._undeliverable)

    def _frame(self, frame: list[memoryview]) -> None:
        self.frames.append([bytes(b) for b in frame])

    def _lost(self, addr: str, exc: BaseException | None) -> None:
        self.lost.append(addr)

    def _undeliverable(self, addr: str, frame: Any, exc: BaseException) -> None:
        self.undeliverable.append(addr)


async def until(predicate: Any, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.001)


@pytest.fixture(params=["unix:@regency-test-{n}", "tcp:127.0.0.1:0"])
def address(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param.format(n=id(request))


def test_frames_flow_both_ways_and_in_order(address: str) -> None:
    async def main() -> None:
        secret = new_secret()
        a, b = Endpoint(secret), Endpoint(secret)
        addr_b = await b.router.listen(address)
        addr_a = await a.router.listen(address + "-a" if "unix" in address else address)
        for i in range(200):
            a.router.send(addr_b, [pickle.dumps(i), b"x" * (i % 7)])
        big = bytes(range(256)) * 40_000  # 10 MB: several partial writes
        a.router.send(addr_b, [b"big", big])
        await until(lambda: len(b.frames) == 201)
        assert [pickle.loads(f[0]) for f in b.frames[:200]] == list(range(200))
        assert b.frames[200][1] == big
        b.router.send(addr_a, [b"back"])  # reuses the accepted connection
        await until(lambda: a.frames == [[b"back"]])
        a.router.close()
        b.router.close()

    asyncio.run(main())


def test_wrong_secret_is_refused_and_the_server_keeps_serving(
    address: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        server = Endpoint(new_secret())
        addr = await server.router.listen(address)
        intruder = Endpoint(new_secret())
        await intruder.router.listen("tcp:127.0.0.1:0")
        intruder.router.send(addr, [b"payload that must never be read"])
        await until(lambda: intruder.undeliverable == [addr])
        assert server.frames == []
        friend = Endpoint(server.router.secret)
        await friend.router.listen("tcp:127.0.0.1:0")
        friend.router.send(addr, [b"hello"])
        await until(lambda: server.frames == [[b"hello"]])
        for e in (server, intruder, friend):
            e.router.close()

    with caplog.at_level(logging.WARNING, logger="regency"):
        asyncio.run(main())
    assert any("authentication failed" in r.getMessage() for r in caplog.records)


def _raw_connect(addr: str) -> socket.socket:
    if addr.startswith("unix:@"):
        s = socket.socket(socket.AF_UNIX)
        s.connect("\0" + addr[len("unix:@"):])
    else:
        host, port = addr[len("tcp:"):].rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
    return s


def test_a_peer_that_hangs_up_in_the_handshake_was_not_refused(
    address: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A dialer that goes away before its handshake ends (one that gave up waiting for a
    paused process, a port probe) is logged as a hang-up at INFO, not as a refusal: the
    accepting side refused nothing, and says so only when it did."""
    def said(words: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if words in r.getMessage()]

    async def main() -> None:
        server = Endpoint(new_secret())
        addr = await server.router.listen(address)
        loop = asyncio.get_running_loop()
        s = await loop.run_in_executor(None, _raw_connect, addr)
        s.close()
        await until(lambda: said("hung up"), timeout=20)
        friend = Endpoint(server.router.secret)  # and it goes on serving
        await friend.router.listen("tcp:127.0.0.1:0")
        friend.router.send(addr, [b"hello"])
        await until(lambda: server.frames == [[b"hello"]], timeout=20)
        for e in (server, friend):
            e.router.close()

    with caplog.at_level(logging.INFO, logger="regency"):
        asyncio.run(main())
    (line,) = said("hung up")
    assert line.levelno == logging.INFO and "ended in its handshake" in line.getMessage()
    assert said("refused a connection") == []


@pytest.mark.parametrize("garbage", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x00" * 64,
    b"RG" + b"\xff" * 5000,
    pickle.dumps(["evil"]) * 10,
])
def test_garbage_before_authentication_is_dropped(address: str, garbage: bytes) -> None:
    async def main() -> None:
        server = Endpoint(new_secret())
        addr = await server.router.listen(address)
        loop = asyncio.get_running_loop()
        s = await loop.run_in_executor(None, _raw_connect, addr)
        s.setblocking(False)
        await loop.sock_sendall(s, garbage)
        data = b"?"
        try:
            while data:  # the server closes the connection on us
                data = await asyncio.wait_for(loop.sock_recv(s, 4096), 5)
        except ConnectionResetError:
            pass
        s.close()
        assert server.frames == []
        server.router.close()

    asyncio.run(main())


def test_corrupt_frame_after_authentication_closes_only_that_connection(
    address: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        secret = new_secret()
        server, client = Endpoint(secret), Endpoint(secret)
        addr = await server.router.listen(address)
        await client.router.listen("tcp:127.0.0.1:0")
        client.router.send(addr, [b"ok"])
        await until(lambda: server.frames == [[b"ok"]])
        conn = client.router.peers[addr].conn
        assert conn is not None
        conn.sock.send(b"XX" + struct.pack("!BxI", 1, 1) + b"\0" * 8)  # bad magic
        await until(lambda: addr in client.lost)
        again = Endpoint(secret)
        await again.router.listen("tcp:127.0.0.1:0")
        again.router.send(addr, [b"still serving"])
        await until(lambda: [b"still serving"] in server.frames)
        for e in (server, client, again):
            e.router.close()

    with caplog.at_level(logging.WARNING, logger="regency"):
        asyncio.run(main())
    assert any("closing connection" in r.getMessage() for r in caplog.records)


def _make_pki(tmp: Any, name: str) -> dict[str, str]:
    """A CA and one certificate signed by it, made with the openssl command."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    d = tmp / name
    d.mkdir()

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "1", "-subj", f"/CN={name}-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key", "-out", "node.csr",
        "-subj", f"/CN={name}-node")
    run("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "node.pem", "-days", "1")
    return {"tls_cert": str(d / "node.pem"), "tls_key": str(d / "node.key"),
            "tls_ca": str(d / "ca.pem")}


def test_tls_connections_carry_frames_and_refuse_other_cas(tmp_path: Any) -> None:
    from regency import config

    good = _make_pki(tmp_path, "good")
    other = _make_pki(tmp_path, "other")

    async def exchange(client_pki: dict[str, str]) -> tuple[list[list[bytes]], list[str]]:
        secret = new_secret()
        server, client = Endpoint(secret), Endpoint(secret)
        with config.configured(**good):
            addr = await server.router.listen("tcp:127.0.0.1:0")
        with config.configured(**client_pki):
            await client.router.listen("tcp:127.0.0.1:0")
            client.router.send(addr, [b"over tls", b"z" * 300_000])
            await until(lambda: bool(server.frames) or bool(client.undeliverable))
        server.router.close()
        client.router.close()
        return server.frames, client.undeliverable

    frames, failed = asyncio.run(exchange(good))
    assert frames == [[b"over tls", b"z" * 300_000]] and not failed
    frames, failed = asyncio.run(exchange(other))
    assert frames == [] and len(failed) == 1


def test_plain_client_is_refused_by_a_tls_server(tmp_path: Any) -> None:
    from regency import config

    good = _make_pki(tmp_path, "good")

    async def main() -> None:
        secret = new_secret()
        server, client = Endpoint(secret), Endpoint(secret)
        with config.configured(**good):
            addr = await server.router.listen("tcp:127.0.0.1:0")
        await client.router.listen("tcp:127.0.0.1:0")
        client.router.send(addr, [b"plain text"])
        await until(lambda: bool(client.undeliverable), timeout=15)
        assert server.frames == []
        server.router.close()
        client.router.close()

    asyncio.run(main())


def test_a_ca_argument_is_refused_rather_than_ignored(tmp_path, monkeypatch) -> None:
    """Monarch's ``ca=`` must not be silently dropped: TLS comes from the configuration."""
    from regency import config
    from regency._runtime._secret import SecretError
    from regency.actor import attach_to_workers, run_worker_loop_forever

    monkeypatch.delenv("REGENCY_SECRET", raising=False)  # the accepted case stops there
    monkeypatch.delenv("REGENCY_SECRET_FILE", raising=False)
    ca = tmp_path / "ca.pem"
    ca.write_text("not used")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(ca))  # no user secret can be made under a file

    with pytest.raises(ValueError, match="tls_ca"):
        attach_to_workers(["tcp://127.0.0.1:9"], ca=str(ca))
    with pytest.raises(ValueError, match="tls_ca"):
        run_worker_loop_forever(address="tcp://127.0.0.1:0", ca=str(ca))
    with config.configured(tls_ca=str(ca)), pytest.raises(SecretError):
        run_worker_loop_forever(address="tcp://127.0.0.1:0", ca=str(ca))  # accepted: it is tls_ca


def test_tls_mismatches_name_tls_at_the_client(tmp_path: Any) -> None:
    """Client TLS against a plain server and the reverse, a server certificate of another CA,
    a client certificate the server refuses: each is an AuthenticationError naming TLS (not
    "peer closed the connection"), at once rather than after the connect retries."""
    from regency import config
    from regency._runtime._router import VERSION
    from regency._transport import connect
    from regency._transport._tls import tls_contexts
    from regency.errors import AuthenticationError

    good = _make_pki(tmp_path, "good")
    other = _make_pki(tmp_path, "other")
    foreign_client = {**other, "tls_ca": good["tls_ca"]}

    async def attempt(server_pki: dict[str, str], client_pki: dict[str, str] | None) -> str:
        secret = new_secret()
        server = Endpoint(secret)
        with config.configured(**server_pki):
            addr = await server.router.listen("tcp:127.0.0.1:0")
        ctx = None
        if client_pki is not None:
            with config.configured(**client_pki):
                contexts = tls_contexts()
                assert contexts is not None
                ctx = contexts[1]
        try:
            with pytest.raises(AuthenticationError) as info:
                await asyncio.wait_for(connect(addr, secret, VERSION, "tcp:127.0.0.1:1", ctx),
                                       20)
        finally:
            server.router.close()
        return str(info.value)

    plain_server = asyncio.run(attempt({}, good))
    assert "the peer answered without TLS" in plain_server and "tls_cert" in plain_server
    plain_client = asyncio.run(attempt(good, None))
    assert "requires TLS and this connection has none" in plain_client
    wrong_ca = asyncio.run(attempt(good, other))
    assert "not signed by the CA this side trusts" in wrong_ca
    refused = asyncio.run(attempt(good, foreign_client))
    assert "TLS handshake" in refused and "refused this side's certificate" in refused
