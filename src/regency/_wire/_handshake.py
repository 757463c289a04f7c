"""Mutual HMAC-SHA256 challenge-response handshake, the client proving first (sans-IO).

Every connection starts with this exchange; the frame decoder sees no byte before it
succeeds, and nothing in it is ever unpickled: messages are fixed binary layouts read with
:mod:`struct`. Both sides prove knowledge of the per-job key without revealing it, over two
fresh random nonces, the protocol version and the client's identity string. The *client*
proves first, and the server sends its own proof only after checking the client's: a peer
that does not know the key receives nothing keyed by it, so it has nothing to test guesses
against offline; each guess costs it a connection, which the listener slows down (ADR
0016)::

    client                                       server
    HELLO(version, nonce_c, identity)     ->
                                          <-     CHALLENGE(nonce_s, version)
    PROOF(mac_c)                          ->
                                          <-     OK(mac_s)      (or REJECT(reason))

    mac_c = HMAC-SHA256(key, b"client" + nonce_s + nonce_c + u8(len(v)) + v + identity)
    mac_s = HMAC-SHA256(key, b"server" + nonce_c + nonce_s + u8(len(v)) + v + identity)

The version travels in the clear, and the handshake's own revision (:data:`HANDSHAKE`) is
part of it, so a peer of another release, or one speaking the earlier server-proves-first
exchange, is refused with a message naming both versions. Either side may send REJECT
instead of its next message (other version, failed proof, malformed input), after which
both sides are failed. Message layout (big-endian)::

    magic b"RGHS" (4) | kind (u8) | body length (u16) | body

    HELLO      u8 vlen | version (utf-8) | nonce_c (32) | identity (utf-8, rest)
    CHALLENGE  nonce_s (32) | u8 vlen | version
    PROOF      mac_c (32)
    OK         mac_s (32)
    REJECT     u8 code | u8 vlen | version | reason (utf-8, rest)

A message is at most :data:`MAX_MESSAGE_BYTES` long; a bad magic, an oversized or
unexpected message fails the handshake as soon as its first bytes show it, without
waiting for more data. HELLO and REJECT keep the layout of the first revision.
"""

from __future__ import annotations

import hmac
import secrets
import struct

from ._errors import HandshakeError

__all__ = [
    "HANDSHAKE",
    "MAX_MESSAGE_BYTES",
    "ClientHandshake",
    "ServerHandshake",
    "new_secret",
]

#: The handshake's revision, appended to the version each side announces: "hs2" is the
#: client-proves-first exchange (the first revision, unmarked, had the server prove first).
HANDSHAKE = "hs2"
MAX_MESSAGE_BYTES = 4096
NONCE_BYTES = 32
MAC_BYTES = 32

_MAGIC = b"RGHS"
_HEADER = struct.Struct("!4sBH")
_HEADER_BYTES = _HEADER.size

_HELLO, _CHALLENGE, _PROOF, _OK, _REJECT = 1, 2, 3, 4, 5
_KIND_NAMES = {_HELLO: "HELLO", _CHALLENGE: "CHALLENGE", _PROOF: "PROOF", _OK: "OK"}
_KIND_NAMES[_REJECT] = "REJECT"

_REJECT_VERSION, _REJECT_AUTH, _REJECT_PROTOCOL = 1, 2, 3

AUTH_FAILED = "authentication failed: the peer does not know the job secret"


def new_secret() -> bytes:
    """Return a fresh random 32-byte job secret."""
    return secrets.token_bytes(32)


def _message(kind: int, body: bytes) -> bytes:
    """Frame one handshake message."""
    return _HEADER.pack(_MAGIC, kind, len(body)) + body


def _version_mismatch(peer: str, mine: str) -> str:
    return f"version mismatch: peer speaks regency {peer}, this side {mine}"


def _kind_name(kind: int) -> str:
    return _KIND_NAMES.get(kind, f"unknown message kind {kind}")


class _Handshake:
    """What both sides share: message framing, failure and buffering."""

    def __init__(self, secret: bytes, version: str) -> None:
        if not isinstance(secret, (bytes, bytearray, memoryview)) or len(secret) == 0:
            raise ValueError("the job secret must be non-empty bytes")
        version = f"{version}+{HANDSHAKE}"
        version_bytes = version.encode()
        if len(version_bytes) > 255:
            raise ValueError("the version string must encode to at most 250 bytes")
        self._secret = bytes(secret)
        self._version = version
        self._version_field = bytes([len(version_bytes)]) + version_bytes
        self._inbuf = bytearray()
        self._outbuf = bytearray()
        self._unused = bytearray()
        self._expect = _HELLO
        self._identity: str | None = None
        self.done = False
        self.failed = False
        self.error: HandshakeError | None = None
        self.peer_version: str | None = None

    @property
    def peer_identity(self) -> str | None:
        """The client's identity string; ``None`` until the handshake is done."""
        return self._identity if self.done else None

    def data_to_send(self) -> bytes:
        """Return (and forget) the bytes waiting to be sent to the peer."""
        out = bytes(self._outbuf)
        self._outbuf.clear()
        return out

    def unused_data(self) -> bytes:
        """Return (and forget) the bytes that arrived after the handshake completed."""
        out = bytes(self._unused)
        self._unused.clear()
        return out

    def bytes_needed(self) -> int:
        """How many more bytes complete the message being received (at least 1).

        A transport that reads no more than this never takes bytes that follow the
        handshake into it (on a Unix socket, the first frame may carry file descriptors,
        which a plain read of its bytes would discard).
        """
        buf = self._inbuf
        if len(buf) < _HEADER_BYTES:
            return _HEADER_BYTES - len(buf)
        _, _, length = _HEADER.unpack_from(buf)
        return max(1, _HEADER_BYTES + length - len(buf))

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Process bytes from the peer; never raises for bad input, sets ``.failed``.

        After completion the bytes are kept for :meth:`unused_data`; after failure they
        are ignored.
        """
        if self.failed:
            return
        if self.done:
            self._unused += data
            return
        self._inbuf += data
        self._process()

    # -- internals ---------------------------------------------------------------------

    def _process(self) -> None:
        """Handle every complete message in the input buffer."""
        buf = self._inbuf
        while not (self.done or self.failed):
            seen = min(len(buf), len(_MAGIC))
            if buf[:seen] != _MAGIC[:seen]:
                self._fail(
                    "not a regency handshake: bad magic "
                    f"{bytes(buf[:len(_MAGIC)])!r} (expected {_MAGIC!r})"
                )
                return
            if len(buf) < _HEADER_BYTES:
                return
            _, kind, length = _HEADER.unpack_from(buf)
            if _HEADER_BYTES + length > MAX_MESSAGE_BYTES:
                self._fail(
                    f"handshake message of {_HEADER_BYTES + length} bytes is over the "
                    f"{MAX_MESSAGE_BYTES}-byte limit"
                )
                return
            if kind != self._expect and kind != _REJECT:
                self._fail(
                    f"unexpected handshake message {_kind_name(kind)} while waiting "
                    f"for {_kind_name(self._expect)}"
                )
                return
            end = _HEADER_BYTES + length
            if len(buf) < end:
                return
            body = bytes(buf[_HEADER_BYTES:end])
            del buf[:end]
            if kind == _REJECT:
                self._on_reject(body)
            else:
                self._handle(kind, body)
        if self.done and buf:
            self._unused += buf
            buf.clear()

    def refuse(self, reason: str) -> None:
        """Fail before any message, telling the peer ``reason`` in a REJECT."""
        self._fail(reason)

    def _handle(self, kind: int, body: bytes) -> None:
        raise NotImplementedError

    def _fail(self, message: str, code: int = _REJECT_PROTOCOL, notify: bool = True) -> None:
        """Fail with *message*; unless *notify* is false, tell the peer with a REJECT."""
        self.failed = True
        self.error = HandshakeError(message)
        self._inbuf.clear()
        if notify:
            reason = message.encode()[: MAX_MESSAGE_BYTES // 2]
            body = bytes([code]) + self._version_field + reason
            self._outbuf += _message(_REJECT, body)

    def _on_reject(self, body: bytes) -> None:
        """The peer refused the handshake; fail with a message from this side's view."""
        if len(body) < 2 or len(body) < 2 + body[1]:
            self._fail("malformed handshake REJECT from the peer", notify=False)
            return
        code, vlen = body[0], body[1]
        version = body[2 : 2 + vlen].decode(errors="replace")
        reason = body[2 + vlen :].decode(errors="replace")
        if code == _REJECT_VERSION:
            self.peer_version = version
            self._fail(_version_mismatch(version, self._version), notify=False)
        elif code == _REJECT_AUTH:
            self._fail(AUTH_FAILED, notify=False)
        else:
            self._fail(f"the peer rejected the handshake: {reason}", notify=False)

    def _mac(self, label: bytes, first: bytes, second: bytes, identity: bytes) -> bytes:
        """HMAC-SHA256 over the transcript, keyed by the job secret."""
        message = label + first + second + self._version_field + identity
        return hmac.digest(self._secret, message, "sha256")


class ClientHandshake(_Handshake):
    """The connecting side: sends HELLO at once, proves itself on the server's challenge,
    and is done once the server's proof checks out.

    *identity* (for instance the client's own listening address) reaches the server and is
    covered by both proofs.
    """

    def __init__(self, secret: bytes, version: str, identity: str) -> None:
        super().__init__(secret, version)
        self._identity_bytes = identity.encode()
        self._nonce = secrets.token_bytes(NONCE_BYTES)
        self._peer_nonce = b""
        hello = _message(_HELLO, self._version_field + self._nonce + self._identity_bytes)
        if len(hello) > MAX_MESSAGE_BYTES:
            raise ValueError(f"identity too long for a {MAX_MESSAGE_BYTES}-byte HELLO")
        self._outbuf += hello
        self._expect = _CHALLENGE

    def _handle(self, kind: int, body: bytes) -> None:
        if kind == _CHALLENGE:
            self._on_challenge(body)
        else:
            self._on_ok(body)

    def _on_challenge(self, body: bytes) -> None:
        if len(body) < NONCE_BYTES + 1 or len(body) != NONCE_BYTES + 1 + body[NONCE_BYTES]:
            self._fail("malformed handshake CHALLENGE")
            return
        try:
            self.peer_version = body[NONCE_BYTES + 1 :].decode()
        except UnicodeDecodeError:
            self._fail("malformed handshake CHALLENGE: version is not UTF-8")
            return
        if self.peer_version != self._version:
            self._fail(_version_mismatch(self.peer_version, self._version), _REJECT_VERSION)
            return
        self._peer_nonce = body[:NONCE_BYTES]
        proof = self._mac(b"client", self._peer_nonce, self._nonce, self._identity_bytes)
        self._outbuf += _message(_PROOF, proof)
        self._expect = _OK

    def _on_ok(self, body: bytes) -> None:
        if len(body) != MAC_BYTES:
            self._fail("malformed handshake OK")
            return
        expected = self._mac(b"server", self._nonce, self._peer_nonce, self._identity_bytes)
        if not hmac.compare_digest(expected, body):
            self._fail(AUTH_FAILED, _REJECT_AUTH)
            return
        self.done = True


class ServerHandshake(_Handshake):
    """The accepting side: challenges the client, checks its proof, and only then proves
    itself (nothing keyed by the secret reaches a client that has not proved it).

    ``peer_identity`` is the identity the client announced, available once ``done``.
    """

    def __init__(self, secret: bytes, version: str) -> None:
        super().__init__(secret, version)
        self._nonce = secrets.token_bytes(NONCE_BYTES)
        self._peer_nonce = b""
        self._peer_identity_bytes = b""

    def _handle(self, kind: int, body: bytes) -> None:
        if kind == _HELLO:
            self._on_hello(body)
        else:
            self._on_proof(body)

    def _on_hello(self, body: bytes) -> None:
        if not body or len(body) < 1 + body[0] + NONCE_BYTES:
            self._fail("malformed handshake HELLO")
            return
        vend = 1 + body[0]
        try:
            version = body[1:vend].decode()
            identity = body[vend + NONCE_BYTES :].decode()
        except UnicodeDecodeError:
            self._fail("malformed handshake HELLO: text is not UTF-8")
            return
        self.peer_version = version
        if version != self._version:
            self._fail(_version_mismatch(version, self._version), _REJECT_VERSION)
            return
        self._peer_nonce = body[vend : vend + NONCE_BYTES]
        self._peer_identity_bytes = body[vend + NONCE_BYTES :]
        self._identity = identity
        self._outbuf += _message(_CHALLENGE, self._nonce + self._version_field)
        self._expect = _PROOF

    def _on_proof(self, body: bytes) -> None:
        expected = self._mac(b"client", self._nonce, self._peer_nonce, self._peer_identity_bytes)
        if not hmac.compare_digest(expected, body):
            self._fail(AUTH_FAILED, _REJECT_AUTH)
            return
        mac = self._mac(b"server", self._peer_nonce, self._nonce, self._peer_identity_bytes)
        self._outbuf += _message(_OK, mac)
        self.done = True


def looks_like_handshake(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` (the first bytes a peer sent) begin a regency handshake in the clear
    (a TLS peer's first byte is 0x16 instead)."""
    head = bytes(data[: len(_MAGIC)])
    return bool(head) and _MAGIC.startswith(head)
