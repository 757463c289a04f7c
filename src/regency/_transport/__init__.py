"""Transports: authenticated, framed connections over unix and tcp sockets."""

from ._address import Address
from ._connection import Connection
from ._endpoints import Listener, connect, handshake

__all__ = ["Address", "Connection", "Listener", "connect", "handshake"]
