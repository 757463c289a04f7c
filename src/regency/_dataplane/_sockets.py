"""Blocking stream sockets for data connections: connect, listen, handshake, exact I/O.

Data connections never touch an event loop: they are driven by dedicated threads with
blocking calls (which release the GIL), so a transfer of any size leaves the control plane
of both processes free.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from .._transport import Address
from .._transport._endpoints import bind_listening
from .._wire import ClientHandshake, ServerHandshake
from ..errors import AuthenticationError

__all__ = ["connect", "handshake", "listen", "move_views", "recv_exact", "recv_into_exact"]

SOCKET_BUFFER = 4 << 20
_IOV = 1024  # buffers one sendmsg / recvmsg_into call takes (Linux's UIO_MAXIOV)
HANDSHAKE_TIMEOUT = 10.0


def _new(addr: Address) -> socket.socket:
    if addr.scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    else:
        family = socket.AF_INET6 if ":" in addr.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        except OSError:
            pass
    return sock


def listen(address: str) -> tuple[socket.socket, str]:
    """A listening socket on ``address`` (tcp port 0: any free port); returns it and its
    bound address."""
    addr = Address.parse(address)
    return bind_listening(_new(addr), addr, 128)


def handshake(sock: socket.socket, hs: ClientHandshake | ServerHandshake,
              timeout: float = HANDSHAKE_TIMEOUT,
              penalty: Callable[[], float] | None = None) -> None:
    """Run the HMAC handshake on a blocking socket.

    ``penalty`` (accepting side) says how long to wait, when it fails, before the refusal
    is sent (within the deadline).

    Raises:
        AuthenticationError: the peer failed it.
        ConnectionError / TimeoutError: the peer went away or took too long.
    """
    deadline = time.monotonic() + timeout
    saved = sock.gettimeout()
    try:
        out = hs.data_to_send()
        if out:
            sock.sendall(out)
        while not hs.done and not hs.failed:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            data = sock.recv(4096)
            if not data:
                raise ConnectionResetError("peer closed the data connection in the handshake")
            hs.receive_data(data)
            out = hs.data_to_send()
            if hs.failed and penalty is not None:
                time.sleep(max(0.0, min(penalty(), deadline - time.monotonic())))
            if out:
                sock.sendall(out)
    except TimeoutError:
        raise TimeoutError("data connection handshake took too long") from None
    finally:
        sock.settimeout(saved)
    if hs.failed:
        raise AuthenticationError(str(hs.error))
    if hs.unused_data():
        raise ConnectionError("unexpected bytes after the data connection handshake")


def connect(address: str, secret: bytes, version: str, identity: str,
            timeout: float) -> socket.socket:
    """Connect to a data-plane server and authenticate."""
    addr = Address.parse(address)
    sock = _new(addr)
    try:
        sock.settimeout(timeout)
        sock.connect(addr.host if addr.scheme == "unix" else (addr.host, addr.port))
        sock.settimeout(None)
        handshake(sock, ClientHandshake(secret, version, identity))
    except BaseException:
        sock.close()
        raise
    return sock


def recv_into_exact(sock: socket.socket, view: memoryview) -> None:
    """Fill ``view`` from ``sock`` (straight into it: no intermediate copy)."""
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionResetError("data connection closed in the middle of a transfer")
        got += k


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock``."""
    buf = bytearray(n)
    recv_into_exact(sock, memoryview(buf))
    return bytes(buf)


def move_views(io: Callable[[list[memoryview]], int], views: list[memoryview]) -> None:
    """Move every byte of ``views`` with ``io``, a scatter/gather call (``sock.sendmsg`` or
    the byte count of ``sock.recvmsg_into``: given buffers, it returns the bytes moved),
    called again from wherever a partial call stopped: many small ranges in few calls.

    Raises:
        ConnectionResetError: ``io`` moved nothing (the peer closed the connection).
    """
    views = [v if v.format == "B" else v.cast("B") for v in views if v.nbytes]
    i = 0
    while i < len(views):
        moved = io(views[i:i + _IOV])
        if moved <= 0:
            raise ConnectionResetError("data connection closed in the middle of a transfer")
        while moved:
            n = len(views[i])
            if moved < n:
                views[i] = views[i][moved:]
                break
            moved -= n
            i += 1
