"""Optional TLS for tcp connections, over memory BIOs (we own the socket, see _connection).

Configured with ``tls_cert``, ``tls_key`` and ``tls_ca`` (paths; env ``REGENCY_TLS_CERT`` ...).
When set, every tcp connection runs a TLS handshake first (mutual: each side presents its
certificate and checks the other's against the CA), then regency's own HMAC handshake inside
it. Unix sockets never use TLS: they do not leave the machine.
"""

from __future__ import annotations

import asyncio
import socket
import ssl

from .. import config
from .._wire._handshake import looks_like_handshake

#: What to do when the two sides disagree on TLS.
ADVICE = ("configure TLS on both sides or on neither (tls_cert, tls_key, tls_ca; "
          "REGENCY_TLS_CERT, REGENCY_TLS_KEY, REGENCY_TLS_CA)")


class PlainPeer(ConnectionError):
    """A regency peer started its handshake in the clear on a connection that needs TLS."""


def tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext] | None:
    """(server, client) contexts from the configuration, or None when TLS is off."""
    cert, key, ca = (str(config.get(k) or "") for k in ("tls_cert", "tls_key", "tls_ca"))
    if not (cert or key or ca):
        return None
    if not (cert and key and ca):
        raise ValueError("TLS needs all of tls_cert, tls_key and tls_ca (REGENCY_TLS_CERT, "
                         "REGENCY_TLS_KEY, REGENCY_TLS_CA)")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for ctx in (server, client):
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cert, key)
        ctx.load_verify_locations(ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    client.check_hostname = False  # peers are named by address; the CA is the trust anchor
    return server, client


class TlsSession:
    """TLS over a non-blocking socket we read and write ourselves."""

    def __init__(self, ctx: ssl.SSLContext, server_side: bool) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self._in, self._out, server_side=server_side)

    async def handshake(self, sock: socket.socket, timeout: float) -> None:
        """Run the TLS handshake over ``sock``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        first = True
        while True:
            try:
                self.obj.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            except ssl.SSLError:
                alert = self._out.read()  # tell the peer why (a bad certificate, say)
                if alert:
                    await loop.sock_sendall(sock, alert)
                raise
            out = self._out.read()
            if out:
                await loop.sock_sendall(sock, out)
            if done:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError("TLS handshake took too long")
            data = await asyncio.wait_for(loop.sock_recv(sock, 65536), remaining)
            if not data:
                raise ConnectionResetError(
                    "peer closed the connection during the TLS handshake (does it use TLS? "
                    f"{ADVICE})")
            if first and self.obj.server_side and looks_like_handshake(data):
                raise PlainPeer("a regency peer without TLS connected to this TLS listener")
            first = False
            self._in.write(data)

    def encrypt(self, data: bytes | memoryview) -> bytes:
        """Ciphertext for ``data``."""
        self.obj.write(data)
        return self._out.read()

    def decrypt(self, data: bytes | memoryview) -> bytes:
        """Plaintext for the ciphertext ``data`` (maybe empty while a record is incomplete)."""
        self._in.write(data)
        chunks = []
        while True:
            try:
                chunk = self.obj.read(1 << 20)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def explain(exc: ssl.SSLError, address: str) -> str:
    """Why a TLS handshake with ``address`` failed, in words that name the likely cause."""
    reason = str(getattr(exc, "reason", "") or "").upper()
    if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
                  "HTTP_REQUEST", "UNKNOWN_PROTOCOL"):
        why = f"the peer answered without TLS (it has no TLS configured?): {ADVICE}"
    elif reason == "CERTIFICATE_VERIFY_FAILED":
        why = ("the peer's certificate is not signed by the CA this side trusts (tls_ca): "
               "give both sides certificates of one CA")
    elif "ALERT" in reason or "CERTIFICATE_REQUIRED" in reason:
        why = ("the peer refused this side's certificate (is it signed by the CA the peer "
               "trusts?)")
    else:
        why = "the two sides could not agree"
    return f"TLS handshake with {address} failed: {why} ({exc})"
