"""The reader's side of data connections: a pool of authenticated sockets per owner address,
and chunked reads and writes over them (straight into / out of the local memory)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable

from . import _proto as p
from ._errors import BufferDroppedError, RDMAError
from ._handle import Descriptor
from ._sockets import connect, move_views, recv_exact

__all__ = ["Pool", "read_ranges", "transfer"]


class Pool:
    """Idle data connections by owner address (one in use per transfer stream)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, bytes], list[socket.socket]] = {}

    def take(self, address: str, secret: bytes, timeout: float) -> socket.socket:
        with self._lock:
            idle = self._idle.get((address, secret))
            if idle:
                return idle.pop()
        identity = f"pid {os.getpid()} on {socket.gethostname()}"
        return connect(address, secret, p.VERSION, identity, timeout)

    def give(self, address: str, secret: bytes, sock: socket.socket) -> None:
        sock.settimeout(None)
        with self._lock:
            self._idle.setdefault((address, secret), []).append(sock)

    def close_all(self) -> None:
        """Close every idle connection (at exit)."""
        with self._lock:
            socks = [s for idle in self._idle.values() for s in idle]
            self._idle.clear()
        for s in socks:
            s.close()


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the transfer did not finish in time")
    return left


def _reply(sock: socket.socket, deadline: float) -> int:
    sock.settimeout(_remaining(deadline))
    status, n, value = p.REPLY.unpack(recv_exact(sock, p.REPLY.size))
    text = recv_exact(sock, n).decode(errors="replace") if n else ""
    if status == p.DROPPED:
        raise BufferDroppedError(text)
    if status != p.OK:
        raise RDMAError(text or f"data-plane error {status}")
    return int(value)


def _recv(sock: socket.socket, view: memoryview, deadline: float) -> None:
    got, n = 0, len(view)
    while got < n:
        sock.settimeout(_remaining(deadline))
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionResetError("data connection closed in the middle of a transfer")
        got += k


def _send(sock: socket.socket, view: memoryview, deadline: float) -> None:
    step = 16 << 20
    for start in range(0, len(view), step):
        sock.settimeout(_remaining(deadline))
        sock.sendall(view[start:start + step])


def transfer(pool: Pool, address: str, secret: bytes, desc: Descriptor, op: int,
             view: memoryview, offset: int, deadline: float) -> None:
    """Read (``op=READ``) or write ``view`` at ``offset`` of the remote buffer.

    Raises:
        BufferDroppedError: the owner no longer has the buffer.
        RDMAError: the owner refused (read-only, range) or the connection failed.
        TimeoutError: ``deadline`` passed.
    """
    def then(sock: socket.socket) -> None:
        if op == p.READ:
            _recv(sock, view, deadline)
        else:
            _send(sock, view, deadline)
            _reply(sock, deadline)

    request = p.REQUEST.pack(p.MAGIC, op, desc.reg_id, desc.key, offset, len(view))
    _exchange(pool, address, secret, request, then, deadline)


def read_ranges(pool: Pool, address: str, secret: bytes, desc: Descriptor, view: memoryview,
                pieces: list[tuple[int, int, int]], deadline: float) -> None:
    """Read many ranges of the remote buffer in one round trip (a READV request): each piece
    (offset in the buffer, offset in ``view``, a byte view, and length), 1 to
    ``MAX_RANGES`` of them.

    Raises: as :func:`transfer`; ValueError (nothing sent) where a piece does not fit
    ``view`` or the count is out of bounds.
    """
    if not 0 < len(pieces) <= p.MAX_RANGES:
        raise ValueError(f"read_ranges: {len(pieces)} ranges (1 to {p.MAX_RANGES} a request)")
    if any(at < 0 or n < 0 or at + n > view.nbytes for _, at, n in pieces):
        raise ValueError(f"read_ranges: a piece does not fit the {view.nbytes} bytes of view")
    total = sum(n for _, _, n in pieces)

    def then(sock: socket.socket) -> None:
        def recv(buffers: list[memoryview]) -> int:
            sock.settimeout(_remaining(deadline))
            return sock.recvmsg_into(buffers)[0]

        move_views(recv, [view[at:at + n] for _, at, n in pieces])

    entries = b"".join(p.RANGE.pack(desc.offset + r, n) for r, _, n in pieces)
    request = p.REQUEST.pack(p.MAGIC, p.READV, desc.reg_id, desc.key, 0, len(pieces))
    _exchange(pool, address, secret, request + entries, then, deadline, expect=total)


def _exchange(pool: Pool, address: str, secret: bytes, request: bytes,
              then: Callable[[socket.socket], None], deadline: float,
              expect: int | None = None) -> None:
    """Send ``request`` on a pooled connection, read the reply (whose value must be
    ``expect``, where given: the bytes that follow), run ``then``; the connection goes back
    to the pool if it ended in a clean state (an error reply included)."""
    sock = pool.take(address, secret, _remaining(deadline))
    reusable = False
    try:
        sock.settimeout(_remaining(deadline))
        sock.sendall(request)
        try:
            value = _reply(sock, deadline)
        except RDMAError:
            reusable = True  # an error reply leaves the connection in a clean state
            raise
        if expect is not None and value != expect:
            raise RDMAError(f"the owner announced {value} bytes, not the {expect} asked for")
        then(sock)
        reusable = True
    except TimeoutError:
        raise TimeoutError("the transfer did not finish in time") from None
    finally:
        if reusable:
            pool.give(address, secret, sock)
        else:
            sock.close()
