"""The three envelope kinds a frame's header decodes to, and the reply status codes.

Every frame of every round trip carries one of these (see :mod:`._messages` for what each
means and :mod:`._envelope` for their encoding). They live apart from the system messages so
that they can be compiled with the hot path (ADR 0031): a header is built once per frame
received, and its fields are read by compiled code on both sides of a call.
"""

from __future__ import annotations

import time
from typing import Any, Final

__all__ = [
    "ACTOR_ERROR",
    "CALL_TAG",
    "EOS",
    "HEADER_KINDS",
    "OK",
    "RAW_ERROR",
    "REPLY_TAG",
    "SUPERVISION",
    "SYSTEM_ENDPOINT",
    "SYSTEM_TAG",
    "Call",
    "Cast",
    "Header",
    "PortRef",
    "Reply",
    "System",
]

PortRef = tuple[str, int]
"""Where a reply goes: (the address of the receiver's runtime, the port id there)."""

Cast = tuple[tuple[str, ...], int, tuple[int, ...], tuple[int, ...]]
"""A cast's target slice as it travels: (labels, offset, sizes, strides)."""

_monotonic: Final = time.monotonic

# -- Reply status --------------------------------------------------------------------------------
OK = 0
ACTOR_ERROR = 1  # value: (exception | None, type name, text, traceback text, endpoint label)
RAW_ERROR = 2  # value: an exception sent with port.exception(); raised as is
SUPERVISION = 3  # value: (message, MeshFailure | None)
EOS = 4  # no more values on this port (a member stopped before answering)

SYSTEM_ENDPOINT = "sys:"
"""Prefix of a ``Call`` endpoint that names a system-message kind (one that travels a tree)."""


# -- headers -------------------------------------------------------------------------------------
# Plain classes, not dataclasses: compiled, a dataclass keeps the interpreted ``__init__`` that
# ``dataclasses`` generates, and these are built for every frame received.


class Call:
    """A message for the actors of mesh ``mesh_uid`` (one header for every member)."""

    __slots__ = ("budget", "cast", "endpoint", "expires", "fanout", "mesh_uid", "port",
                 "sender")
    FIELDS: Final = ("mesh_uid", "endpoint", "port", "cast", "sender", "fanout", "budget")

    # ``cast`` is a ``Cast``, typed as any tuple: compiled, a fixed-length tuple type would be
    # unpacked into a C struct and boxed again, a new tuple, at each read from Python.
    def __init__(self, mesh_uid: str, endpoint: str, port: PortRef | None,
                 cast: tuple[Any, ...], sender: str, fanout: int, budget: float = 0.0) -> None:
        self.mesh_uid = mesh_uid
        self.endpoint = endpoint
        self.port = port  # where the reply goes; None for a broadcast
        self.cast = cast  # the slice the message was sent to (a ``Cast``)
        self.sender = sender  # the actor id of the sender ("root" for the client)
        self.fanout = fanout  # > 0: relayed down the mesh's relay tree, with this fan-out
        # > 0: the seconds the sender gave the call to be answered in (``deadline()``),
        # counted here from the header's decoding, as ``expires`` (this process's
        # ``time.monotonic()``; 0.0: no deadline). Relative on the wire: hosts' clocks differ.
        self.budget = budget
        self.expires = _monotonic() + budget if budget > 0.0 else 0.0

    @property
    def system_kind(self) -> str | None:
        """The system-message kind this call carries (``sys:KIND`` endpoints), if any."""
        name = self.endpoint
        return name[4:] if name.startswith(SYSTEM_ENDPOINT) else None

    def __eq__(self, other: object) -> bool:
        return type(other) is Call and _values(self) == _values(other)

    def __hash__(self) -> int:
        return hash(_values(self))

    def __repr__(self) -> str:
        return _repr(self)


class Reply:
    """A value or an error for port ``port_id`` of the receiving runtime."""

    __slots__ = ("port_id", "rank", "status")
    FIELDS: Final = ("port_id", "rank", "status")

    def __init__(self, port_id: int, rank: int | None, status: int) -> None:
        self.port_id = port_id
        self.rank = rank  # the sender's global rank, when a mesh member answers
        self.status = status  # OK, ACTOR_ERROR, RAW_ERROR, SUPERVISION or EOS

    def __eq__(self, other: object) -> bool:
        return type(other) is Reply and _values(self) == _values(other)

    def __hash__(self) -> int:
        return hash(_values(self))

    def __repr__(self) -> str:
        return _repr(self)


class System:
    """The header of a system message; the payload is the message object."""

    __slots__ = ("kind",)
    FIELDS: Final = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __eq__(self, other: object) -> bool:
        return type(other) is System and _values(self) == _values(other)

    def __hash__(self) -> int:
        return hash(_values(self))

    def __repr__(self) -> str:
        return _repr(self)


def _values(header: Any) -> tuple[Any, ...]:
    """The fields of ``header``, in order."""
    return tuple([getattr(header, name) for name in header.FIELDS])


def _repr(header: Any) -> str:
    args = ", ".join(f"{name}={getattr(header, name)!r}" for name in header.FIELDS)
    return f"{type(header).__name__}({args})"


Header = Call | Reply | System
"""What a frame's first buffer decodes to."""

CALL_TAG: Final = 0
REPLY_TAG: Final = 1
SYSTEM_TAG: Final = 2

HEADER_KINDS: tuple[type[Call], type[Reply], type[System]] = (Call, Reply, System)
"""The header classes, indexed by their tag (the first item of an encoded header)."""
