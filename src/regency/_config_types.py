"""Monarch's configuration enums, ``ChannelTransport`` and ``Encoding``, and what they mean here.

Pure: no I/O. :mod:`regency.config` uses :func:`transport_name` to turn whatever a program
passes as a transport (an enum member, ``"tcp"``, ``"ipc"``, ``"tcp://..."``) into the name
of a regency transport, or an error that says what to use instead.
"""

from __future__ import annotations

import enum

__all__ = ["ChannelTransport", "Encoding", "transport_name"]


class ChannelTransport(enum.IntEnum):
    """How procs listen for messages; the members and values of Monarch's enum.

    ``Unix`` (the default) and ``TcpWithLocalhost`` / ``TcpWithHostname`` select regency's
    ``unix`` and ``tcp`` transports. The others name transports that cannot exist here
    (``Local`` is an in-process channel; ``Meta*`` are Meta-internal; ``Quic`` is not built)
    or that regency configures another way (``Tls``: set the ``tls_cert``, ``tls_key`` and
    ``tls_ca`` keys); choosing one raises ``ValueError`` saying so.
    """

    TcpWithLocalhost = 0
    TcpWithHostname = 1
    MetaTlsWithHostname = 2
    MetaTlsWithIpV6 = 3
    Tls = 4
    Quic = 5
    MetaQuicWithHostname = 6
    MetaQuicWithIpV6 = 7
    Local = 8
    Unix = 9

    def get(self) -> ChannelTransport:
        """The member itself (Monarch's binding spells reading the variant this way)."""
        return self

    def __str__(self) -> str:
        return f"ChannelTransport.{self.name}"


class Encoding(enum.IntEnum):
    """Monarch's message encodings. Accepted for ``default_encoding``; regency has one wire
    format (its frames with pickled payloads and out-of-band buffers), so the value has no
    effect."""

    Bincode = 0
    Json = 1
    Multipart = 2

    def __str__(self) -> str:
        return f"Encoding.{self.name}"


_TRANSPORTS = {
    ChannelTransport.Unix: "unix",
    ChannelTransport.TcpWithLocalhost: "tcp",
    ChannelTransport.TcpWithHostname: "tcp",
}

_NAMES = {
    "unix": "unix", "ipc": "unix", "tcp": "tcp", "tcpwithlocalhost": "tcp",
    "tcpwithhostname": "tcp",
}

_WHY = {
    ChannelTransport.Local: "Local is a channel inside one process, and regency's procs are "
    "separate processes",
    ChannelTransport.Tls: "regency turns TLS on with the tls_cert, tls_key and tls_ca keys "
    "(see docs/hardening.md) on top of the tcp transport",
    ChannelTransport.Quic: "regency has no QUIC transport",
}


def transport_name(value: object) -> str:
    """The regency transport (``"unix"`` or ``"tcp"``) that ``value`` asks for.

    ``value`` is a :class:`ChannelTransport`, or a string: ``"unix"``, ``"ipc"``, ``"tcp"``,
    an enum member's name, or an address such as ``"tcp://host:port"`` (its scheme counts).
    """
    if isinstance(value, ChannelTransport):
        if value in _TRANSPORTS:
            return _TRANSPORTS[value]
        why = _WHY.get(value, f"{value.name} is a Meta-internal transport")
        raise ValueError(f"transport {value} cannot be used in regency: {why}; use "
                         "ChannelTransport.Unix (one machine) or ChannelTransport.TcpWithHostname"
                         " (across machines)")
    text = str(value).strip()
    scheme = text.split("://", 1)[0].lower().removeprefix("channeltransport.")
    if scheme in _NAMES:
        return _NAMES[scheme]
    for member in ChannelTransport:
        if member.name.lower() == scheme:
            return transport_name(member)
    raise ValueError(f"unknown transport {value!r}; use 'unix' (or 'ipc'), 'tcp', or a "
                     "ChannelTransport member")
