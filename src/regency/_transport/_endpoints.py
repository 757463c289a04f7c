"""Listening and connecting, by address scheme (unix or tcp)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from .. import config
from ._address import Address
from ._connection import Connection

ProtocolFactory = Callable[[], Connection]


def _tune(sock: socket.socket) -> None:
    size = int(config.get("socket_buffer_bytes"))
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, size)
        except OSError:
            pass


async def listen(address: str, factory: ProtocolFactory) -> tuple[asyncio.AbstractServer, str]:
    """Start serving ``address``; returns the server and the address actually bound."""
    loop = asyncio.get_running_loop()
    addr = Address.parse(address)
    if addr.scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        _tune(sock)
        sock.bind(addr.host)
        server = await loop.create_unix_server(factory, sock=sock, backlog=1024)
        return server, str(addr)
    family = socket.AF_INET6 if ":" in addr.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _tune(sock)
    sock.bind((addr.host, addr.port))
    server = await loop.create_server(factory, sock=sock, backlog=1024)
    port = sock.getsockname()[1]
    return server, str(Address("tcp", addr.host, port))


async def connect(address: str, factory: ProtocolFactory) -> Connection:
    """Open a connection to ``address`` (the handshake starts at once)."""
    loop = asyncio.get_running_loop()
    addr = Address.parse(address)
    if addr.scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target: object = addr.host
    else:
        family = socket.AF_INET6 if ":" in addr.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        target = (addr.host, addr.port)
    _tune(sock)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, target)  # type: ignore[arg-type]
    except BaseException:
        sock.close()
        raise
    if addr.scheme == "unix":
        _, proto = await loop.create_unix_connection(factory, sock=sock)
    else:
        _, proto = await loop.create_connection(factory, sock=sock)
    return proto
