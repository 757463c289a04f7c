"""A blocking, authenticated link to a regency runtime that speaks system messages.

The debug console and a paused rank's pdb both talk to the controller's debug service over a
plain socket of their own: a pdb that pauses an async actor blocks the very loop that would
otherwise read its input, and the console is a short-lived process with no runtime. The link
is an ordinary regency peer all the same: it dials the runtime's address, proves the job
secret with the same HMAC handshake (:mod:`regency._wire._handshake`; TLS first when it is
configured and the address is tcp) and then exchanges ``System`` frames encoded by the one
frame codec. The runtime accepts it like any peer and answers on the same connection.
"""

from __future__ import annotations

import itertools
import os
import socket
import ssl
import threading

from .._runtime._pickling import dumps_inband, loads
from .._transport._address import Address
from .._version import __version__
from .._wire import ClientHandshake, FrameDecoder, decode_header, encode_frame, system_header
from .._wire._messages import SYSTEM_KINDS, System, SystemMessage
from ..errors import AuthenticationError, TransportError

__all__ = ["Link", "LinkClosed"]

_ids = itertools.count(1)


class LinkClosed(TransportError):
    """The runtime at the other end of a :class:`Link` closed it (or never answered)."""


class Link:
    """One authenticated connection: :meth:`send` system messages, :meth:`recv` them back.

    ``send`` may be called from any thread; ``recv`` from one thread at a time.
    """

    def __init__(self, address: str, secret: bytes, role: str, timeout: float = 10.0,
                 tls: ssl.SSLContext | None = None) -> None:
        self.address = address
        self.identity = f"{role}:{socket.gethostname()}:{os.getpid()}:{next(_ids)}"
        self._write = threading.Lock()
        self._decoder = FrameDecoder()
        self._sock = _dial(address, timeout, tls)
        try:
            _handshake(self._sock, ClientHandshake(secret, __version__, self.identity),
                       self._decoder)
        except BaseException:
            self._sock.close()
            raise
        self._sock.settimeout(None)
        self.closed = False

    def send(self, msg: SystemMessage) -> None:
        """Send one system message (any thread). Raises :class:`LinkClosed` when gone."""
        frame = encode_frame([system_header(msg.KIND), dumps_inband(msg)])
        data = b"".join(bytes(b) for b in frame)
        with self._write:
            try:
                self._sock.sendall(data)
            except OSError as exc:
                raise LinkClosed(f"the link to {self.address} is closed: {exc}") from exc

    def recv(self, timeout: float | None = None) -> SystemMessage | None:
        """The next system message; None when ``timeout`` passed first.

        Raises :class:`LinkClosed` when the peer closed the connection."""
        while True:
            frame = self._decoder.next_frame()
            if frame is not None:
                header = decode_header(frame[0])
                if not isinstance(header, System) or header.kind not in SYSTEM_KINDS:
                    continue  # not for us (nothing else is ever sent on a link)
                msg = loads(frame[1], frame[2:])
                if isinstance(msg, SYSTEM_KINDS[header.kind]):
                    return msg
                continue
            self._sock.settimeout(timeout)
            try:
                data = self._sock.recv(1 << 16)
            except TimeoutError:
                return None
            except OSError as exc:
                raise LinkClosed(f"the link to {self.address} is closed: {exc}") from exc
            if not data:
                raise LinkClosed(f"{self.address} closed the link")
            self._decoder.feed(data)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if not self.closed:
            self.closed = True
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()


def _dial(address: str, timeout: float, tls: ssl.SSLContext | None) -> socket.socket:
    addr = Address.parse(address)
    if addr.scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target: object = addr.host
    else:
        family = socket.AF_INET6 if ":" in addr.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        target = (addr.host, addr.port)
    sock.settimeout(timeout)
    try:
        sock.connect(target)  # type: ignore[arg-type]
        if tls is None and addr.scheme == "tcp":
            from .._transport._tls import tls_contexts

            pair = tls_contexts()
            tls = pair[1] if pair else None
        if tls is not None and addr.scheme == "tcp":
            sock = tls.wrap_socket(sock)
    except BaseException:
        sock.close()
        raise
    return sock


def _handshake(sock: socket.socket, hs: ClientHandshake, decoder: FrameDecoder) -> None:
    """Run the client side of the handshake over a blocking socket."""
    out = hs.data_to_send()
    if out:
        sock.sendall(out)
    while not hs.done and not hs.failed:
        data = sock.recv(min(hs.bytes_needed(), 4096) or 1)
        if not data:
            raise AuthenticationError("the peer closed the connection during the handshake "
                                      "(wrong secret, or another regency version)")
        hs.receive_data(data)
        out = hs.data_to_send()
        if out:
            try:
                sock.sendall(out)
            except OSError:
                if not hs.failed:
                    raise
    if hs.failed:
        raise AuthenticationError(str(hs.error))
    rest = hs.unused_data()
    if rest:
        decoder.feed(rest)
