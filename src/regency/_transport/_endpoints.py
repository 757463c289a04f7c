"""Listening, connecting and the handshake, by address scheme (unix or tcp).

Every accepted socket must complete the mutual HMAC handshake within a deadline
(``handshake_timeout``) and a few KiB before a ``Connection`` is made for it; a refused peer
is logged in one (rate-limited) line and closed. The listener never stops accepting for want
of resources: EMFILE, ENFILE, ENOMEM and ENOBUFS pause it (10 ms doubling to 1 s, one log
line per episode), and the connections still in their handshake are bounded overall and per
source address (``handshake_max_pending``, ``handshake_max_per_source``; the oldest is closed
to make room). See ``_limits`` and ADR 0016.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable

from .. import config
from .._ratelog import RateLimitedLog
from .._wire import ClientHandshake, ServerHandshake
from ..errors import AuthenticationError
from ._address import Address
from ._limits import Admission, Backoff, Failures, transient_accept_error
from ._tls import ADVICE, PlainPeer, TlsSession, explain

log = logging.getLogger("regency.transport")
refusals = RateLimitedLog(log, burst=10)  # per listener: a flood of refusals logs a few lines

HANDSHAKE_TIMEOUT = 10.0
_TLS_PATIENCE = 3600.0  # a TLS handshake with no deadline of its own: bounded all the same
Accepted = Callable[[socket.socket, str, bytes, "TlsSession | None"], None]


class TlsRefused(ConnectionResetError):
    """The peer closed the connection right after TLS: most likely it refused our
    certificate, which trying again will not change."""


def _tune(sock: socket.socket) -> None:
    size = int(config.get("socket_buffer_bytes"))
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, size)
        except OSError:
            pass


def _new_socket(addr: Address) -> socket.socket:
    if addr.scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    else:
        family = socket.AF_INET6 if ":" in addr.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _tune(sock)
    sock.setblocking(False)
    return sock


async def handshake(sock: socket.socket, hs: ClientHandshake | ServerHandshake,
                    timeout: float | None = HANDSHAKE_TIMEOUT, tls: TlsSession | None = None,
                    penalty: Callable[[], float] | None = None) -> bytes:
    """Run a handshake over ``sock``; returns bytes that followed it.

    ``timeout`` bounds the whole handshake (``None``: wait as long as the peer lives).
    ``penalty`` (on the accepting side) is asked, when the handshake fails, how long to
    wait before the refusal is sent (within the deadline): it slows down online guessing.

    Raises:
        AuthenticationError: the peer failed to authenticate (or speaks another version).
        ConnectionError / TimeoutError: the peer went away or took too long.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    if tls is not None:
        try:
            await tls.handshake(sock, _TLS_PATIENCE if timeout is None else timeout)
        except PlainPeer as exc:  # tell it, in the clear, why it is refused
            hs.refuse(f"it requires TLS and this connection has none: {ADVICE}")
            await loop.sock_sendall(sock, hs.data_to_send())
            raise AuthenticationError(str(exc)) from exc
        early = tls.decrypt(b"")  # records that came with the end of the TLS handshake
        if early:
            hs.receive_data(early)
    out = hs.data_to_send()
    if out:
        await loop.sock_sendall(sock, tls.encrypt(out) if tls else out)
    while not hs.done and not hs.failed:
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            raise TimeoutError(f"handshake took too long (more than {timeout:.1f}s)")
        # Exactly what completes the message (TLS reads whole records): bytes after the
        # handshake, and file descriptors sent with them, stay in the socket for the
        # connection.
        size = 4096 if tls is not None else min(hs.bytes_needed(), 4096)
        try:
            data = await asyncio.wait_for(loop.sock_recv(sock, size), remaining)
        except asyncio.TimeoutError:
            raise TimeoutError(f"handshake took too long (more than {timeout:.1f}s)") from None
        if not data:
            if tls is not None:
                raise TlsRefused(
                    "peer closed the connection during the handshake, after TLS (did it "
                    "refuse this side's certificate? give both sides certificates of one CA)")
            raise ConnectionResetError("peer closed the connection during the handshake")
        hs.receive_data(tls.decrypt(data) if tls else data)
        out = hs.data_to_send()
        if hs.failed and penalty is not None:
            wait = penalty() if deadline is None else min(penalty(), deadline - loop.time())
            if wait > 0:
                await asyncio.sleep(wait)
        if out:
            try:
                await loop.sock_sendall(sock, tls.encrypt(out) if tls else out)
            except OSError:
                if not hs.failed:
                    raise
    if hs.failed:
        raise AuthenticationError(str(hs.error))
    return hs.unused_data()


def bind_listening(sock: socket.socket, addr: Address, backlog: int) -> tuple[socket.socket, str]:
    """Bind ``sock`` to ``addr`` and listen; returns it with the address actually bound (a tcp
    port 0 becomes the port the kernel chose)."""
    if addr.scheme == "tcp":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr.host, addr.port))
        addr = Address("tcp", addr.host, sock.getsockname()[1])
    else:
        sock.bind(addr.host)
    sock.listen(backlog)
    return sock, str(addr)


class Listener:
    """Accepts connections on one address; hands authenticated sockets to ``on_accepted``."""

    def __init__(self, secret: bytes, version: str, on_accepted: Accepted,
                 tls: ssl.SSLContext | None = None) -> None:
        self.secret = secret
        self.version = version
        self.on_accepted = on_accepted
        self.sock: socket.socket | None = None
        self.address = ""
        self._task: asyncio.Task[None] | None = None
        self._pending: dict[asyncio.Task[None], socket.socket] = {}
        self._tls = tls  # the server-side context, for tcp connections
        self.timeout = float(config.get("handshake_timeout"))
        self.admission: Admission[asyncio.Task[None]] = Admission(
            int(config.get("handshake_max_pending")), int(config.get("handshake_max_per_source")))
        self.failures = Failures()
        self.backoff = Backoff()
        self.accepted = 0  # connections taken from the backlog (authenticated or not)

    async def start(self, address: str) -> str:
        """Bind and start accepting; returns the bound address."""
        addr = Address.parse(address)
        self.sock, self.address = bind_listening(_new_socket(addr), addr, 1024)
        self._task = asyncio.get_running_loop().create_task(self._accept_loop())
        return self.address

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.sock is not None
        backoff = self.backoff
        while True:
            try:
                conn, peer = await loop.sock_accept(self.sock)
            except asyncio.CancelledError:
                return
            except OSError as exc:
                if self.sock.fileno() < 0:
                    return  # closed
                if not transient_accept_error(exc):
                    log.error("regency: %s stops accepting: %s", self.address, exc)
                    return
                if not backoff.in_episode:
                    log.warning("regency: %s cannot accept a connection (%s); retrying with "
                                "a pause of up to %.0f s", self.address, exc, backoff.cap)
                await asyncio.sleep(backoff.next())
                continue
            if backoff.in_episode:
                assert backoff.since is not None
                log.warning("regency: %s accepts again after %.0f ms (%d failed accepts)",
                            self.address, 1000 * (time.monotonic() - backoff.since),
                            backoff.failures)
                backoff.reset()
            self.accepted += 1
            try:
                conn.setblocking(False)
                if conn.family != socket.AF_UNIX:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                conn.close()
                continue
            source = peer[0] if conn.family in (socket.AF_INET, socket.AF_INET6) else None
            task = loop.create_task(self._authenticate(conn, source))
            self._pending[task] = conn
            task.add_done_callback(self._handshake_over)
            for old in self.admission.admit(task, source):
                refusals.warning(self.address, "regency: %s has too many connections in their "
                                 "handshake (from %s): closing the oldest", self.address,
                                 source or "this host")
                old.cancel()

    def _handshake_over(self, task: asyncio.Task[None]) -> None:
        self.admission.done(task)
        conn = self._pending.pop(task, None)
        if conn is not None and task.cancelled():
            conn.close()

    async def _authenticate(self, conn: socket.socket, source: str | None) -> None:
        hs = ServerHandshake(self.secret, self.version)
        use_tls = self._tls is not None and conn.family != socket.AF_UNIX
        tls = TlsSession(self._tls, server_side=True) if use_tls and self._tls else None
        try:
            rest = await handshake(conn, hs, self.timeout, tls=tls,
                                   penalty=lambda: self.failures.penalty(source))
        except (ConnectionResetError, BrokenPipeError) as exc:
            if isinstance(exc, TlsRefused):
                _refused(self.address, source, exc)
            else:  # nothing was refused: the peer went away (a dialer that gave up, a probe)
                refusals.log(logging.INFO, self.address, "regency: a connection to %s from %s "
                             "ended in its handshake: the peer hung up (%s)", self.address,
                             source or "this host", exc)
            conn.close()
            return
        except (AuthenticationError, OSError, TimeoutError, asyncio.TimeoutError,
                ssl.SSLError) as exc:
            _refused(self.address, source, exc)
            conn.close()
            return
        self.on_accepted(conn, hs.peer_identity or "?", rest, tls)

    def tasks(self) -> list[asyncio.Task[None]]:
        """The accept loop and the handshakes in progress."""
        return [t for t in (self._task, *self._pending) if t is not None]

    def close(self) -> None:
        """Stop accepting."""
        for task in list(self._pending):
            task.cancel()
        if self._task is not None:
            self._task.cancel()
        if self.sock is not None:
            self.sock.close()


async def connect(
    address: str, secret: bytes, version: str, identity: str,
    tls_context: ssl.SSLContext | None = None, timeout: float | None = HANDSHAKE_TIMEOUT,
) -> tuple[socket.socket, bytes, TlsSession | None]:
    """Connect and authenticate; returns the socket, any bytes that followed the handshake
    and the TLS session (when TLS is configured and the address is tcp).

    ``timeout`` bounds the handshake (``None``: as long as the peer keeps the connection
    open). A peer that accepted is alive: on a starved machine its answer may take long,
    and giving up would turn load into a failure (the router passes what is left of its
    ``connect_timeout``)."""
    loop = asyncio.get_running_loop()
    addr = Address.parse(address)
    sock = _new_socket(addr)
    target: object = addr.host if addr.scheme == "unix" else (addr.host, addr.port)
    use_tls = tls_context is not None and addr.scheme == "tcp"
    tls = TlsSession(tls_context, server_side=False) if use_tls and tls_context else None
    try:
        await loop.sock_connect(sock, target)  # type: ignore[arg-type]
        rest = await handshake(sock, ClientHandshake(secret, version, identity), timeout,
                               tls=tls)
    except ssl.SSLError as exc:
        sock.close()
        raise AuthenticationError(explain(exc, address)) from exc
    except BaseException:
        sock.close()
        raise
    return sock, rest, tls


def _refused(address: str, source: str | None, exc: BaseException) -> None:
    refusals.warning(address, "regency: refused a connection to %s from %s: %s", address,
                     source or "this host", exc)
