"""Connections to peer runtimes, one per pair, opened lazily and kept.

Theory of operation
-------------------
Every runtime (controller or proc) listens on one address and knows its peers by their
listening addresses. ``send(addr, frame)`` is only called on the loop thread. The first send
to an address opens a connection (retrying while the peer is still starting, as procs are
addressed before they listen) and queues frames until the handshake is done; later sends write
straight through. An accepted connection announces its owner's listening address in the
handshake, and is reused for sending back when we have none of our own to that address.

Rule: a frame for a given address always leaves on the same connection, so messages from one
sender to one actor arrive in send order. A peer whose connection was lost is dead for good
(addresses are never reused); frames for it go to ``on_undeliverable``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from .. import config
from .._transport import Address, Connection, connect, listen
from .._wire import ClientHandshake, ServerHandshake

log = logging.getLogger("regency.router")
VERSION = "regency-0.1"

Frame = list[Any]


class Peer:
    """Our sending side towards one address."""

    __slots__ = ("addr", "conn", "dead", "queue")

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.conn: Connection | None = None
        self.queue: list[Frame] | None = []
        self.dead: BaseException | None = None


class Router:
    """Owns the listening socket and every connection of one runtime."""

    def __init__(
        self,
        secret: bytes,
        on_frame: Callable[[list[memoryview]], None],
        on_peer_lost: Callable[[str, BaseException | None], None],
        on_undeliverable: Callable[[str, Frame, BaseException], None],
    ) -> None:
        self.secret = secret
        self.address = ""
        self.peers: dict[str, Peer] = {}
        self.connections: set[Connection] = set()
        self._on_frame = on_frame
        self._on_peer_lost = on_peer_lost
        self._on_undeliverable = on_undeliverable
        self._server: asyncio.AbstractServer | None = None
        self.closing = False

    async def listen(self, address: str) -> str:
        """Start accepting connections on ``address``; returns the bound address."""
        self._server, self.address = await listen(address, self._accepting_protocol)
        return self.address

    # -- sending --------------------------------------------------------------------------
    def send(self, addr: str, frame: Frame) -> None:
        """Send one frame to the runtime listening at ``addr`` (loop thread only)."""
        peer = self.peers.get(addr)
        if peer is None:
            peer = self._open(addr)
        if peer.conn is not None:
            peer.conn.send_frame(frame)
        elif peer.queue is not None:
            peer.queue.append(frame)
        else:
            assert peer.dead is not None
            self._on_undeliverable(addr, frame, peer.dead)

    def is_dead(self, addr: str) -> bool:
        """Whether the connection to ``addr`` was lost (or never made)."""
        peer = self.peers.get(addr)
        return peer is not None and peer.dead is not None

    def _open(self, addr: str) -> Peer:
        peer = Peer(addr)
        self.peers[addr] = peer
        asyncio.get_running_loop().create_task(self._connect(peer))
        return peer

    async def _connect(self, peer: Peer) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(config.get("connect_timeout"))
        delay = 0.0005
        while True:
            try:
                await connect(peer.addr, lambda: self._protocol(
                    ClientHandshake(self.secret, VERSION, self.address), peer))
                return  # the handshake goes on in the protocol; _ready takes over
            except (ConnectionRefusedError, FileNotFoundError) as exc:
                if loop.time() > deadline or self.closing:
                    self._mark_dead(peer, exc)
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.02)
            except OSError as exc:
                self._mark_dead(peer, exc)
                return

    # -- protocol plumbing ----------------------------------------------------------------
    def _accepting_protocol(self) -> Connection:
        return self._protocol(ServerHandshake(self.secret, VERSION))

    def _protocol(
        self, handshake: ClientHandshake | ServerHandshake, target: Peer | None = None
    ) -> Connection:
        conn = Connection(handshake, self._ready, self._frame, self._closed)
        conn.target = target
        return conn

    def _ready(self, conn: Connection) -> None:
        self.connections.add(conn)
        if conn.peer_identity is not None:  # accepted: the peer told us its address
            conn.label = conn.peer_identity
            peer = self.peers.get(conn.peer_identity)
            if peer is None:
                peer = Peer(conn.peer_identity)
                self.peers[conn.peer_identity] = peer
            if peer.conn is None and peer.dead is None:
                self._attach(peer, conn)
            return
        target = conn.target  # outgoing: the peer that opened it
        if isinstance(target, Peer) and target.conn is None and target.dead is None:
            self._attach(target, conn)

    def _attach(self, peer: Peer, conn: Connection) -> None:
        peer.conn = conn
        queued, peer.queue = peer.queue, None
        conn.label = peer.addr
        for frame in queued or ():
            conn.send_frame(frame)

    def _frame(self, conn: Connection, frame: list[memoryview]) -> None:
        self._on_frame(frame)

    def _closed(self, conn: Connection, exc: BaseException | None) -> None:
        self.connections.discard(conn)
        lost = exc or ConnectionResetError("connection closed")
        target = conn.target
        if isinstance(target, Peer) and target.conn is None:  # failed before it was ready
            self._mark_dead(target, lost)
        for peer in list(self.peers.values()):
            if peer.conn is conn:
                self._mark_dead(peer, lost)

    def _mark_dead(self, peer: Peer, exc: BaseException) -> None:
        if peer.dead is not None:
            return
        peer.dead = exc
        peer.conn = None
        queued, peer.queue = peer.queue, None
        for frame in queued or ():
            self._on_undeliverable(peer.addr, frame, exc)
        if not self.closing:
            self._on_peer_lost(peer.addr, exc)

    def close(self) -> None:
        """Close the listening socket and every connection."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()


def canonical(address: str) -> str:
    """The canonical text of an address, as peers announce it."""
    return str(Address.parse(address))
