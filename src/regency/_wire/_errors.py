"""Exceptions raised by the sans-IO wire layer.

Both describe input that cannot be trusted: a byte stream that is corrupt, hostile, or
spoken by something that is not a matching regency peer. A transport that sees one closes
the connection; nothing about it is retryable on the same stream.
"""

from __future__ import annotations

__all__ = ["HandshakeError", "ProtocolError"]


class ProtocolError(Exception):
    """The peer sent bytes that break the wire protocol.

    The message says what was wrong (bad magic, a length over a limit, ...). A decoder that
    raised it stays failed.
    """


class HandshakeError(ProtocolError):
    """The connection handshake failed: wrong secret, other version, or malformed message."""
