"""The data-connection protocol: fixed binary headers, no pickle, after an HMAC handshake.

A data connection is a plain stream socket (Unix or TCP) to an owner's data-plane server.
It starts with the same mutual HMAC handshake as control connections (``regency._wire``),
under its own version string, so nothing is read from a peer that does not know the job
secret. Then the reader sends requests, one at a time::

    request   magic b"RGDP" | op u8 | pad 3 | reg_id u64 | key u64 | offset u64 | length u64
    reply     status u8 | pad 3 | text length u32 | value u64 | text (utf-8)

``READ``   reply OK, then ``length`` bytes of the region from ``offset``.
``WRITE``  reply OK ("go"), then the reader sends ``length`` bytes, then reply OK ("done").
``READV``  ``length`` is a count of ranges (1 to ``MAX_RANGES``); that many ``RANGE``
           entries (offset, length) follow the request. Reply OK (value: the bytes in
           all), then each range's bytes, in order: a reshard's many small ranges in one
           round trip. Host memory only.
``CHECK``  reply OK if the registration lives (value: its size).
Any error is a reply with a non-OK status and a text; the connection stays usable.
"""

from __future__ import annotations

import struct

__all__ = ["CHECK", "DROPPED", "ERROR", "MAX_RANGES", "OK", "RANGE", "READ", "READV", "REPLY",
           "REQUEST", "VERSION", "WRITE"]

VERSION = "regency-data-3"  # 2: the client-proves-first handshake (ADR 0016); 3: READV
MAGIC = b"RGDP"
READ, WRITE, CHECK, READV = 1, 2, 3, 4
OK, DROPPED, ERROR = 0, 1, 2

REQUEST = struct.Struct("!4sB3xQQQQ")
REPLY = struct.Struct("!B3xIQ")
RANGE = struct.Struct("!QQ")
MAX_RANGES = 4096  # ranges one READV request may name
MAX_TEXT = 4096
