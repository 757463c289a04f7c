"""The header codec: a typed header to bytes and back, the only code that sees its layout.

Underneath the typed classes of :mod:`._headers`, a header travels as a pickled tuple
``(tag, *fields)`` in field order, the tag being the class's index in ``HEADER_KINDS``:
compact (no class names on the wire) and fast (one C call each way, plus the object's
construction). Nothing outside this module indexes that tuple.

A frame's header is decoded once per process, by the connection that read it
(:func:`decode_inbound`), and handed on as an object with its frame.

The two headers of every round trip have encoders of their own, :func:`encode_call` and
:func:`encode_reply`: the same bytes as ``encode_header(Call(...))`` and
``encode_header(Reply(...))`` without building an object only to take it apart again
(about 0.35 us a message).
"""

from __future__ import annotations

import pickle
from typing import Any, Final

from ._errors import ProtocolError
from ._headers import (
    CALL_TAG,
    HEADER_KINDS,
    REPLY_TAG,
    SYSTEM_TAG,
    Call,
    Cast,
    Header,
    PortRef,
    Reply,
    System,
)

__all__ = [
    "Inbound",
    "decode_header",
    "decode_inbound",
    "encode_call",
    "encode_header",
    "encode_reply",
    "system_header",
]

Inbound = tuple[Header, list[memoryview]]
"""A received frame with its decoded header: ``(header, frame)``; ``frame[0]`` is the raw
header, ``frame[1:]`` the payload."""

_BY_TAG: Final = HEADER_KINDS
_FIELDS: Final[dict[type, tuple[int, tuple[str, ...]]]] = {
    Call: (CALL_TAG, Call.FIELDS),
    Reply: (REPLY_TAG, Reply.FIELDS),
    System: (SYSTEM_TAG, System.FIELDS),
}
_dumps: Final = pickle.dumps
_loads: Final = pickle.loads
_system_headers: dict[str, bytes] = {}


def encode_header(header: Header) -> bytes:
    """The bytes of ``header`` (the first buffer of its frame). A call's ``budget``, its
    last field, is left off when it has none (0.0): most calls have no deadline."""
    tag, names = _FIELDS[type(header)]
    values = [getattr(header, name) for name in names]
    if tag == CALL_TAG and not values[-1]:
        values.pop()
    return _dumps((tag, *values), 5)


def encode_call(mesh_uid: str, endpoint: str, port: PortRef | None, cast: Cast, sender: str,
                fanout: int, budget: float = 0.0) -> bytes:
    """``encode_header(Call(mesh_uid, endpoint, port, cast, sender, fanout, budget))``,
    faster."""
    if budget > 0.0:
        return _dumps((_CALL, mesh_uid, endpoint, port, cast, sender, fanout, budget), 5)
    return _dumps((_CALL, mesh_uid, endpoint, port, cast, sender, fanout), 5)


def encode_reply(port_id: int, rank: int | None, status: int) -> bytes:
    """``encode_header(Reply(port_id, rank, status))``, faster."""
    return _dumps((_REPLY, port_id, rank, status), 5)


_CALL: Final = CALL_TAG
_REPLY: Final = REPLY_TAG


def system_header(kind: str) -> bytes:
    """The encoded ``System(kind)`` header (cached: system headers are few and constant)."""
    data = _system_headers.get(kind)
    if data is None:
        data = _system_headers[kind] = encode_header(System(kind))
    return data


def decode_header(data: Any) -> Header:
    """The header encoded in ``data`` (bytes or a buffer); ``ProtocolError`` if malformed."""
    try:
        fields_ = _loads(data)
        return _BY_TAG[fields_[0]](*fields_[1:])
    except Exception as exc:
        raise _malformed(exc) from None


def decode_inbound(frame: list[memoryview]) -> Inbound:
    """A received frame with its header decoded (the connection calls it once per frame).

    ``decode_header``, inlined: this runs for every frame a process receives.
    """
    try:
        f = _loads(frame[0])
        tag = f[0]
        # The two headers of every round trip built directly (a native call, ADR 0031).
        if tag == _CALL and len(f) == 7:
            return (Call(f[1], f[2], f[3], f[4], f[5], f[6]), frame)
        if tag == _CALL and len(f) == 8:  # a call with a deadline
            return (Call(f[1], f[2], f[3], f[4], f[5], f[6], f[7]), frame)
        if tag == _REPLY and len(f) == 4:
            return (Reply(f[1], f[2], f[3]), frame)
        return (_BY_TAG[tag](*f[1:]), frame)
    except Exception as exc:
        raise _malformed(exc) from None


def _malformed(exc: Exception) -> ProtocolError:
    return ProtocolError(f"malformed message header: {type(exc).__name__}: {exc}")
