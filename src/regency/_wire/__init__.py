"""The sans-IO wire layer: frame codec and connection handshake, with no I/O at all.

Transports move bytes; this package turns them into frames (lists of buffers) and back,
defines every message kind (``_messages``) and encodes their headers (``_envelope``),
and authenticates a connection before its first payload byte is read. It imports no
asyncio, sockets or threads, so every part of it is testable with plain byte strings.
"""

from __future__ import annotations

from ._envelope import (
    Inbound,
    decode_header,
    decode_inbound,
    encode_call,
    encode_header,
    encode_reply,
    system_header,
)
from ._errors import HandshakeError, ProtocolError
from ._frames import (
    ATTACHMENT,
    PROTOCOL_VERSION,
    Attachment,
    Destination,
    FrameDecoder,
    encode_frame,
)
from ._handshake import ClientHandshake, ServerHandshake, new_secret

__all__ = [
    "ATTACHMENT",
    "PROTOCOL_VERSION",
    "Attachment",
    "ClientHandshake",
    "Destination",
    "FrameDecoder",
    "HandshakeError",
    "Inbound",
    "ProtocolError",
    "ServerHandshake",
    "decode_header",
    "decode_inbound",
    "encode_call",
    "encode_frame",
    "encode_header",
    "encode_reply",
    "new_secret",
    "system_header",
]
