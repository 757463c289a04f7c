"""``regency.job``'s helpers on this machine's procs: ``exec_command`` and ``PortForwarder``."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from regency.actor import this_host, this_proc
from regency.job import PortForwarder, exec_command

pytestmark = pytest.mark.timeout(120)


def test_exec_command_returns_the_worst_exit_status(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    cmd = ["sh", "-c", f"touch {marks}/$REGENCY_RANK; exit $REGENCY_RANK"]
    assert exec_command(this_host(), cmd, per_host={"gpus": 3}).get(timeout=90) == 2
    assert sorted(p.name for p in marks.iterdir()) == ["0", "1", "2"]
    out = tmp_path / "out"
    code = exec_command(this_host(), ["sh", "-c", "echo hi $X; echo oops >&2; pwd"],
                        env={"X": "there"}, workdir="/", output_dir=str(out)).get(timeout=90)
    assert code == 0
    assert (out / "stdout.txt").read_text() == "hi there\n/\n"
    assert (out / "stderr.txt").read_text() == "oops\n"
    killed = exec_command(this_host(), ["sh", "-c", "kill -9 $$"]).get(timeout=90)
    assert killed == 137
    assert exec_command(this_host(), ["sh", "-c", "exit 4"], rank=0).get(timeout=90) == 4
    with pytest.raises(ValueError, match="rank 5 is not in a mesh of 1 hosts"):
        exec_command(this_host(), ["true"], rank=5)
    with pytest.raises(ValueError, match="rank or point, not both"):
        exec_command(this_host(), ["true"], rank=0, point={})
    with pytest.raises(ValueError, match="cmd is empty"):
        exec_command(this_host(), [])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def echo_server() -> Iterator[int]:
    """A TCP server on loopback answering each connection with its bytes upper-cased."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            conn.sendall(data.upper())

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(5)
    server.close()


def _roundtrip(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)  # the end of input travels through the forward too
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def test_port_forwarder_forwards_pointwise_and_stops(echo_server: int) -> None:
    dst = this_host().spawn_procs(per_host={"gpus": 2})
    src = this_host().spawn_procs(per_host={"gpus": 2})
    ports = [_free_port(), _free_port()]
    lone = this_host().spawn_procs()
    fwd = this_proc().spawn("fwd", PortForwarder)
    try:
        fwd.forward.call_one(dst, echo_server, src,
                             lambda point: f"127.0.0.1:{ports[point['gpus']]}"
                             ).get(timeout=60)
        big = bytes(range(256)) * 4096  # 1 MiB: many chunks each way
        assert _roundtrip(ports[0], big) == big.upper()
        assert _roundtrip(ports[1], b"hello") == b"HELLO"
        with pytest.raises(Exception, match="differ in shape"):
            fwd.forward.call_one(dst, echo_server, lone, "127.0.0.1:1").get(timeout=60)
    finally:
        fwd.stop().get(timeout=60)
    with pytest.raises(OSError):  # the listeners closed with the forwarder
        socket.create_connection(("127.0.0.1", ports[0]), timeout=5).close()
    for procs in (dst, src, lone):
        procs.stop().get(timeout=30)
