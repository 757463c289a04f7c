"""asyncio transports: authenticated, framed connections over unix and tcp sockets."""

from ._address import Address
from ._connection import Connection
from ._endpoints import connect, listen

__all__ = ["Address", "Connection", "connect", "listen"]
