"""The send side of each live connection, by peer address: a frame's shortest way out.

A call's frame and a reply's frame are the messages of every round trip. When the router
has an open connection to their address, they go straight to its writer from here (one
compiled call, ADR 0031), not through ``Runtime.post`` and ``Router.send``: the router
keeps :class:`Lines` up to date as connections come and go, and everything else (a local
address, a connection still being opened, a lost peer) takes the router's general path,
which has the same outcome for a frame this one could not send.
"""

from __future__ import annotations

from typing import Any

from .._transport._writer import Writer

__all__ = ["Lines"]


class Lines:
    """The writers of the router's open connections, by the peer's listening address."""

    __slots__ = ("writers",)

    def __init__(self) -> None:
        self.writers: dict[str, Writer] = {}

    def send(self, addr: str, frame: list[Any], make_room: bool) -> bool:
        """Write ``frame`` to ``addr`` if a connection to it is open (any thread).

        ``make_room``: flow control first (a call or a cast; ADR 0012). False when the
        frame was not sent: no open connection, or it closed under our feet; the caller
        then hands it to the router, which queues it or reports it undeliverable.
        """
        writer = self.writers.get(addr)
        if writer is None:
            return False
        if make_room:
            writer.make_room()
        try:
            writer.send_frame(frame)
        except ConnectionError:
            return False
        return True
