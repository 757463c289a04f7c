"""The sans-IO wire layer: frame codec and connection handshake, with no I/O at all.

Transports move bytes; this package turns them into frames (lists of buffers) and back,
and authenticates a connection before its first payload byte is read. It imports no
asyncio, sockets or threads, so every part of it is testable with plain byte strings.
"""

from __future__ import annotations

from ._errors import HandshakeError, ProtocolError
from ._frames import ATTACHMENT, PROTOCOL_VERSION, Attachment, FrameDecoder, encode_frame
from ._handshake import ClientHandshake, ServerHandshake, new_secret

__all__ = [
    "ATTACHMENT",
    "PROTOCOL_VERSION",
    "Attachment",
    "ClientHandshake",
    "FrameDecoder",
    "HandshakeError",
    "ProtocolError",
    "ServerHandshake",
    "encode_frame",
    "new_secret",
]
