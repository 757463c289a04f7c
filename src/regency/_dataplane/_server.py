"""The owner's data-plane server: threads that serve reads and writes of registered memory.

Started in a process when it registers its first buffer. It listens on a Unix socket (an
abstract name: same host) and on TCP (other hosts, or when TCP is forced), accepts
authenticated data connections and serves each with a thread of its own, with blocking
sockets that read straight into, and send straight from, the registered memory (CUDA memory
is staged through pinned host chunks, the device copy of one chunk overlapping the socket
I/O of the other). The
process's event loop and actors are never involved, so a transfer of any size does not delay
the control plane (the socket calls release the GIL).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time

from .. import config
from .._ratelog import RateLimitedLog
from .._transport._limits import Admission, Backoff, Failures, transient_accept_error
from .._wire import ServerHandshake
from . import _cuda
from . import _proto as p
from ._errors import BufferDroppedError
from ._memory import Region
from ._registry import Registry
from ._sockets import handshake, listen, move_views, recv_exact, recv_into_exact

log = logging.getLogger("regency.dataplane")
refusals = RateLimitedLog(log)

__all__ = ["DataServer"]

CHUNK = 16 << 20


class DataServer:
    """Listens for data connections and serves them from a registry."""

    def __init__(self, secret: bytes, registry: Registry, *, job: str, tcp_host: str) -> None:
        self.secret = secret
        self.registry = registry
        self.pid = os.getpid()
        self._listeners: list[socket.socket] = []
        self.closed = False
        # the same limits as control listeners (ADR 0016): connections still in their
        # handshake are bounded (the oldest shut down to make room), failures slow down
        self.admission: Admission[socket.socket] = Admission(
            int(config.get("handshake_max_pending")), int(config.get("handshake_max_per_source")))
        self.failures = Failures()
        self.timeout = float(config.get("handshake_timeout"))
        token = secrets.token_hex(4)
        self.unix: str | None = None
        try:
            sock, self.unix = listen(f"unix:@regency-data-{job}-{os.getpid()}-{token}")
            self._serve_listener(sock)
        except OSError as exc:  # no abstract sockets here: TCP only
            log.info("regency: no Unix data socket (%s)", exc)
        self.tcp_host = ""
        self.tcp = ""
        self.listen_tcp(tcp_host)

    def listen_tcp(self, host: str) -> None:
        """Listen on TCP at ``host`` (any port) too; new handles name this address.

        A wildcard host is advertised by this machine's name."""
        sock, bound = listen(f"tcp:{host}:0")
        if host in ("0.0.0.0", "::", ""):
            bound = f"tcp:{socket.gethostname()}:{bound.rsplit(':', 1)[1]}"
        self.tcp, self.tcp_host = bound, host
        self._serve_listener(sock)

    def _serve_listener(self, sock: socket.socket) -> None:
        self._listeners.append(sock)
        threading.Thread(target=self._accept_loop, args=(sock,), daemon=True,
                         name="regency-data-accept").start()

    def _accept_loop(self, lsock: socket.socket) -> None:
        backoff = Backoff()
        while not self.closed:
            try:
                conn, peer = lsock.accept()
            except OSError as exc:
                if self.closed or not transient_accept_error(exc):
                    if not self.closed:
                        log.error("regency: the data-plane listener stops accepting: %s", exc)
                    return
                if not backoff.in_episode:
                    log.warning("regency: the data-plane listener cannot accept a connection "
                                "(%s); retrying with a pause of up to %.0f s", exc, backoff.cap)
                time.sleep(backoff.next())
                continue
            if backoff.in_episode:
                log.warning("regency: the data-plane listener accepts again (%d failed "
                            "accepts)", backoff.failures)
                backoff.reset()
            source = peer[0] if conn.family in (socket.AF_INET, socket.AF_INET6) else None
            for old in self.admission.admit(conn, source):
                refusals.warning("evict", "regency: too many data connections in their "
                                 "handshake (from %s): closing the oldest", source or "this host")
                try:
                    old.shutdown(socket.SHUT_RDWR)  # its thread sees the end and closes it
                except OSError:
                    pass
            try:
                threading.Thread(target=self._serve, args=(conn, source), daemon=True,
                                 name="regency-data-conn").start()
            except RuntimeError:  # no thread to be had: this connection is refused
                self.admission.done(conn)
                conn.close()

    def _serve(self, conn: socket.socket, source: str | None = None) -> None:
        try:
            if conn.family != socket.AF_UNIX:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                handshake(conn, ServerHandshake(self.secret, p.VERSION), self.timeout,
                          penalty=lambda: self.failures.penalty(source))
            except Exception as exc:
                refusals.warning("refused", "regency: refused a data connection from %s: %s",
                                 source or "this host", exc)
                return
            finally:
                self.admission.done(conn)
            while self._one_request(conn):
                pass
        except Exception as exc:
            if not isinstance(exc, (ConnectionError, OSError)):
                log.warning("regency: data connection ended: %s", exc)
        finally:
            conn.close()

    def _one_request(self, conn: socket.socket) -> bool:
        head = conn.recv(p.REQUEST.size, socket.MSG_WAITALL)
        if not head:
            return False  # the reader closed its pooled connection
        if len(head) < p.REQUEST.size:
            head += recv_exact(conn, p.REQUEST.size - len(head))
        magic, op, reg_id, key, offset, length = p.REQUEST.unpack(head)
        if magic != p.MAGIC:
            raise ConnectionError("bad data-plane request")
        ranges = _ranges_of(conn, length) if op == p.READV else [(offset, length)]
        try:
            reg = self.registry.lookup(reg_id, key)
            region = reg.region
            _check(op, region, reg_id, ranges)
        except BufferDroppedError as exc:
            _reply(conn, p.DROPPED, str(exc))
            return True
        except ValueError as exc:
            _reply(conn, p.ERROR, str(exc))
            return True
        if op == p.CHECK:
            _reply(conn, p.OK, value=region.nbytes)
        elif op == p.READV:
            self._serve_ranges(conn, region.view(), ranges)
        elif region.on_device:
            self._serve_device(conn, op, region.address + offset, length, region.device)
        else:
            self._serve_host(conn, op, region.view(), offset, length)
        return True  # ``reg`` kept the memory alive until here

    @staticmethod
    def _serve_ranges(conn: socket.socket, view: memoryview,
                      ranges: list[tuple[int, int]]) -> None:
        head = _reply_bytes(p.OK, value=sum(n for _, n in ranges))  # in the same sendmsg
        move_views(conn.sendmsg, [memoryview(head),
                                  *(view[offset:offset + n] for offset, n in ranges)])

    @staticmethod
    def _serve_host(conn: socket.socket, op: int, view: memoryview, offset: int,
                    length: int) -> None:
        if op == p.READ:
            _reply(conn, p.OK, value=length)
            for start in range(offset, offset + length, CHUNK):
                conn.sendall(view[start:min(start + CHUNK, offset + length)])
        else:
            _reply(conn, p.OK)
            recv_into_exact(conn, view[offset:offset + length])
            _reply(conn, p.OK, value=length)

    @staticmethod
    def _serve_device(conn: socket.socket, op: int, address: int, length: int,
                      device: int) -> None:
        mem = _cuda.device_bytes(address, length, device)
        if op == p.READ:
            _reply(conn, p.OK, value=length)
            _cuda.staged(mem, device, to_host=True, io=conn.sendall)
        else:
            _reply(conn, p.OK)
            _cuda.staged(mem, device, to_host=False,
                         io=lambda chunk: recv_into_exact(conn, chunk))
            _reply(conn, p.OK, value=length)

    def close(self) -> None:
        """Stop accepting (connections in progress finish on their own)."""
        self.closed = True
        for sock in self._listeners:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def _ranges_of(conn: socket.socket, count: int) -> list[tuple[int, int]]:
    """The ``count`` (offset, length) entries that follow a READV request.

    Raises:
        ConnectionError: a count out of bounds (the connection cannot be read on).
    """
    if not 0 < count <= p.MAX_RANGES:
        raise ConnectionError(f"a data-plane READV of {count} ranges (1 to {p.MAX_RANGES})")
    raw = recv_exact(conn, count * p.RANGE.size)
    return [p.RANGE.unpack_from(raw, i * p.RANGE.size) for i in range(count)]


def _check(op: int, region: Region, reg_id: int, ranges: list[tuple[int, int]]) -> None:
    """Raise ValueError (replied to the reader) if ``op`` on ``ranges`` cannot be served."""
    if op not in (p.READ, p.WRITE, p.CHECK, p.READV):
        raise ValueError(f"unknown data-plane operation {op}")
    for offset, length in ranges:
        if offset + length > region.nbytes:
            raise ValueError(f"range {offset}+{length} is past the end of RDMABuffer "
                             f"{reg_id} ({region.nbytes} bytes)")
    if op == p.WRITE and region.readonly:
        raise ValueError(f"RDMABuffer {reg_id} is read-only")
    if op == p.READV and region.on_device:
        raise ValueError(f"RDMABuffer {reg_id} is device memory: it is read whole or in "
                         "pieces, not in many ranges at once")


def _reply(conn: socket.socket, status: int, text: str = "", value: int = 0) -> None:
    conn.sendall(_reply_bytes(status, text, value))


def _reply_bytes(status: int, text: str = "", value: int = 0) -> bytes:
    data = text.encode()[: p.MAX_TEXT]
    return p.REPLY.pack(status, len(data), value) + data
