"""Connections to peer runtimes, one per pair, opened lazily and kept.

Theory of operation
-------------------
Every runtime (controller or proc) listens on one address and knows its peers by their
listening addresses. ``send(addr, frame)`` may be called from any thread: it writes straight
to the peer's socket when the connection is up, and queues the frame (in order) while it is
being opened; the connection retries while the peer is still starting, since procs are
addressed before they listen. An accepted connection announces its owner's listening address
in the handshake and is reused for sending back when we have none of our own to that address.
Both ends may open at once: when the peer's connection is accepted while ours is still being
opened, frames leave on the accepted one, and our attempt only ends (it never makes a peer
that reached us "lost": a proc paused in a debugger answers no handshake, yet is there).

Rule: frames for one address leave on one connection, in the order ``send`` was called, so
messages from one sender to one actor arrive in send order. A peer whose connection was lost
is dead for good (addresses are never reused); frames for it go to ``on_undeliverable``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from .. import config
from .._transport import Address, Connection, Listener, connect
from .._transport._endpoints import TlsRefused
from .._transport._poller import Poller
from .._transport._shm import SegmentPool
from .._transport._tls import TlsSession, tls_contexts
from .._version import __version__
from ..errors import AuthenticationError
from ._borrow import ReadHere
from ._bufpool import POOL
from ._connector import Connector
from ._lines import Lines

log = logging.getLogger("regency.router")
VERSION = __version__  # checked in every handshake: peers of another version are refused

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
        on_frame: Callable[[Any], None],
        on_peer_lost: Callable[[str, BaseException | None], None],
        on_undeliverable: Callable[[str, Frame, BaseException], None],
        decode: Callable[[list[memoryview]], Any] | None = None,
    ) -> None:
        """``on_frame`` gets each frame received, as ``decode`` made it (its header decoded,
        once, by the connection that read it) or, without ``decode``, as it came."""
        self.secret = secret
        self._decode = decode
        self.address = ""
        self.loop: asyncio.AbstractEventLoop | None = None
        self.peers: dict[str, Peer] = {}
        self.lines = Lines()  # the writers of open connections, for the round trip's frames
        self.connections: set[Connection] = set()
        self._lock = threading.RLock()
        self.shm_pool = SegmentPool(int(config.get("shm_pool_bytes")))
        self._on_frame = on_frame
        self._on_peer_lost = on_peer_lost
        self._on_undeliverable = on_undeliverable
        self._listeners: list[Listener] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.connector = Connector()  # opens connections off the loop (``_connector``)
        self.tcp_identity = ""  # how peers across the network know us, if we listen on tcp
        self.resolver: Callable[[str], Awaitable[str]] | None = None  # for via: addresses
        self.tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None  # (server, client)
        self.close_hooks: list[Callable[[str], None]] = []  # any connection closed: its peer
        # Peers whose handshake has no deadline, and whose hang-ups during a handshake are
        # retried however long it takes (a proc's host agent): a slow handshake is load;
        # only an established connection that ends (or a death signal) says they are gone.
        self.patient: set[str] = set()
        # Whether a peer is a proc still starting (its host agent, in this process, says
        # so): its connect deadline runs from when it is up (it may be slow to listen, or
        # busy in its bootstrap), since its exit is reported anyway.
        self.starting: Callable[[str], bool] = lambda addr: False
        self.closing = False
        self.poller: Poller | None = None  # plain connections are read through it
        self.read_here = ReadHere()  # the seam to borrowed reads (ADR 0010): kept current here
        self.high_water = int(config.get("send_high_water_bytes")) or (1 << 62)  # ADR 0012
        self.loop_block_limit = float(config.get("loop_send_block_limit"))

    async def listen(self, address: str, identity: str | None = None) -> str:
        """Accept connections on ``address``; returns the bound address.

        The first call sets ``self.address``, the name we announce to peers (``identity``
        when given: a proc behind a host agent is known by a logical ``via:`` name).
        """
        if self.loop is None:
            asyncio.get_running_loop().call_later(_TRIM_EVERY_S, self._trim_pool)
        self.loop = asyncio.get_running_loop()
        if self.poller is None and config.get("borrow_reads"):
            self.poller = Poller(self.loop, float(config.get("borrow_linger")))
            self.read_here.enabled = True
            self.read_here.spin = float(config.get("borrow_spin"))
            self.read_here.busy_too = bool(config.get("borrow_spin_busy"))
        if self.tls is None:
            self.tls = tls_contexts()  # the TLS configuration in force when we start listening
        listener = Listener(self.secret, VERSION, self._accepted,
                            self.tls[0] if self.tls else None)
        bound = await listener.start(address)
        self._listeners.append(listener)
        if not self.address:
            self.address = identity or bound
        if bound.startswith("tcp:") and not self.tcp_identity:
            self.tcp_identity = identity or bound
        return bound

    def identity_for(self, target: str) -> str:
        """Our name as announced to ``target``: reachable from where it is."""
        if self.tcp_identity and not target.startswith("unix:"):
            return self.tcp_identity
        return self.address

    # -- sending (any thread) ---------------------------------------------------------------
    def send(self, addr: str, frame: Frame) -> None:
        """Send one frame to the runtime listening at ``addr``; any thread, in call order."""
        peer = self.peers.get(addr)
        conn = peer.conn if peer is not None else None
        if conn is not None:
            try:
                conn.send_frame(frame)
                return
            except ConnectionError:
                pass  # lost under our feet: fall through to the slow path
        with self._lock:
            peer = self.peers.get(addr)
            if peer is None:
                peer = self._open(addr)
            if peer.queue is not None:
                peer.queue.append(_owned(frame))  # the caller may reuse its buffers at once
                return
            if peer.conn is not None and not peer.conn.closed:
                try:
                    peer.conn.send_frame(frame)
                    return
                except ConnectionError as exc:
                    reason: BaseException = exc
            else:
                reason = peer.dead or ConnectionResetError("connection closed")
        self._on_undeliverable(addr, frame, reason)

    def make_room(self, addr: str) -> None:
        """Flow control before a call or cast to ``addr`` (any thread): wait while the
        connection's write queue is above its high-water mark (see ADR 0012)."""
        peer = self.peers.get(addr)
        conn = peer.conn if peer is not None else None
        if conn is not None:
            conn.make_room()  # returns at once while the queue is below its mark

    def is_dead(self, addr: str) -> bool:
        """Whether the connection to ``addr`` was lost (or never made)."""
        peer = self.peers.get(addr)
        return peer is not None and peer.dead is not None

    def _open(self, addr: str) -> Peer:
        peer = Peer(addr)
        self.peers[addr] = peer
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self._start_connect, peer)
        return peer

    def _start_connect(self, peer: Peer) -> None:
        assert self.loop is not None
        task = self.loop.create_task(self._connect(peer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, peer: Peer) -> None:
        loop = asyncio.get_running_loop()
        limit = float(config.get("connect_timeout"))
        deadline = loop.time() + limit
        delay = 0.0005
        target = peer.addr
        if target.startswith("via:"):
            try:
                assert self.resolver is not None, "no resolver for via: addresses"
                target = await self.resolver(peer.addr)
            except Exception as exc:
                log.warning("regency: cannot resolve %s: %s", peer.addr, exc)
                lost = exc if isinstance(exc, OSError) else ConnectionError(str(exc))
                self._mark_dead(peer, lost)
                return
        while True:
            starting = self.starting(peer.addr)  # it lives, however slow to listen
            patient = starting or peer.addr in self.patient
            if starting:
                deadline = max(deadline, loop.time() + limit)
            try:
                left = None if patient else max(deadline - loop.time(), _MIN_HANDSHAKE_S)
                sock, rest, tls = await self.connector.run(
                    connect(target, self.secret, VERSION, self.identity_for(peer.addr),
                            self.tls[1] if self.tls else None, left))
                break
            except OSError as exc:
                if patient and (starting or _hung_up(exc)):
                    deadline = max(deadline, loop.time() + limit)  # it answered, slowly
                if not _retryable(exc) or loop.time() > deadline or self.closing:
                    self._give_up(peer, exc)
                    return
                await asyncio.sleep(delay)
                if peer.conn is not None:  # it connected to us meanwhile
                    return
                delay = min(delay * 2, 0.02 if _starting(exc) else 0.5)
            except AuthenticationError as exc:
                self._give_up(peer, exc)
                return
            except Exception as exc:  # a bug must not leave the peer's queue waiting forever
                log.exception("regency: internal error connecting to %s", peer.addr)
                self._give_up(peer, exc, quiet=True)
                return
        conn = self._connection(sock, None, peer.addr, rest, tls)
        with self._lock:
            if peer.conn is None and peer.dead is None:
                self._attach(peer, conn)
        conn.start()

    def _give_up(self, peer: Peer, exc: BaseException, quiet: bool = False) -> None:
        """Our attempt to reach ``peer`` failed for good: the peer is lost, unless it opened a
        connection to us meanwhile (accepted and attached: our frames leave on it, and the
        attempt was only a second way there). A peer busy too long to answer a handshake,
        such as a proc whose loop a debugger pauses, still reads its own connection."""
        if peer.conn is not None:
            log.debug("regency: %s reached us itself; our attempt ended: %s", peer.addr, exc)
            return
        if not quiet:
            log.warning("regency: cannot connect to %s: %s", peer.addr, exc)
        self._mark_dead(peer, exc)

    # -- accepting (loop thread) ------------------------------------------------------------
    def _accepted(self, sock: socket.socket, identity: str, rest: bytes,
                  tls: TlsSession | None) -> None:
        conn = self._connection(sock, identity, identity, rest, tls)
        with self._lock:
            peer = self.peers.get(identity)
            if peer is None:
                peer = Peer(identity)
                self.peers[identity] = peer
            if peer.conn is None and peer.dead is None:
                self._attach(peer, conn)
        conn.start()

    def _connection(self, sock: socket.socket, identity: str | None, label: str,
                    rest: bytes, tls: TlsSession | None = None) -> Connection:
        assert self.loop is not None
        conn = Connection(sock, self.loop, self._frame, self._closed, peer_identity=identity,
                          label=label, leftover=rest, allocate=POOL.allocate, tls=tls,
                          shm_min_bytes=int(config.get("shm_min_bytes")), shm_pool=self.shm_pool,
                          poller=self.poller, decode=self._decode)
        conn.high_water = self.high_water
        conn.loop_block_limit = self.loop_block_limit
        self.connections.add(conn)
        return conn

    def _attach(self, peer: Peer, conn: Connection) -> None:
        """Make ``conn`` the sending side of ``peer`` and flush its queue (lock held).

        If the connection breaks while flushing, the unsent frames stay queued: losing the
        connection then marks the peer dead and reports them undeliverable.
        """
        queued = peer.queue or []
        peer.queue = None
        for i, frame in enumerate(queued):
            try:
                conn.send_frame(frame)
            except ConnectionError:
                peer.queue = queued[i:]
                break
        peer.conn = conn
        self.lines.writers[peer.addr] = conn.writer

    def _frame(self, conn: Connection, item: Any) -> None:
        here = self.read_here
        here.source = conn
        here.inbound[conn.label] = conn
        try:
            self._on_frame(item)
        finally:
            here.source = None

    def _trim_pool(self) -> None:
        """Give back shared memory nobody has used for a while (loop, every few seconds)."""
        if self.closing or self.loop is None:
            return
        self.shm_pool.trim(_SHM_IDLE_S)
        self.loop.call_later(_TRIM_EVERY_S, self._trim_pool)

    def last_activity(self, host_agent: str) -> float:
        """When bytes last moved on a connection with a host (its agent or procs behind it).

        A large transfer may hold a heartbeat up behind it; moving bytes prove liveness too.
        """
        via = f"via:{host_agent}/"
        times = [c.last_activity for c in list(self.connections)
                 if c.label == host_agent or c.label.startswith(via)]
        return max(times, default=0.0)

    def live_connections(self, addr: str) -> bool:
        """Whether any connection with the runtime at ``addr`` is still open (either way)."""
        return any(c.label == addr and not c.closed for c in self.connections)

    def _closed(self, conn: Connection, exc: BaseException | None) -> None:
        self.connections.discard(conn)
        self.read_here.closed(conn.label, conn)
        for hook in self.close_hooks:
            hook(conn.label)
        lost = exc or ConnectionResetError("connection closed")
        for peer in list(self.peers.values()):
            if peer.conn is conn:
                self._mark_dead(peer, lost)

    def _mark_dead(self, peer: Peer, exc: BaseException) -> None:
        with self._lock:
            if peer.dead is not None:
                return
            peer.dead = exc
            peer.conn = None
            self.lines.writers.pop(peer.addr, None)
            queued, peer.queue = peer.queue, None
        for frame in queued or ():
            self._on_undeliverable(peer.addr, frame, exc)
        if not self.closing:
            self._on_peer_lost(peer.addr, exc)

    def close(self) -> None:
        """Close the listening socket and every connection (loop thread)."""
        self.closing = True
        for listener in self._listeners:
            listener.close()
        for task in list(self._tasks):
            task.cancel()
        self.connector.close()
        for conn in list(self.connections):
            conn.close()
        if self.poller is not None:
            self.poller.close()

    async def aclose(self) -> None:
        """``close()``, then wait for the cancelled connection attempts to finish."""
        self.close()
        tasks = list(self._tasks) + [t for li in self._listeners for t in li.tasks()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


_TRIM_EVERY_S = 5.0
_SHM_IDLE_S = 30.0  # a free shared-memory segment unused this long goes back to the kernel


def _owned(frame: Frame) -> Frame:
    """The frame with large caller-owned buffers copied (small ones and bytes kept)."""
    out: Frame = []
    for buf in frame:
        if isinstance(buf, bytes):
            out.append(buf)
            continue
        view = buf.raw() if hasattr(buf, "raw") else memoryview(buf)
        out.append(view.tobytes() if view.nbytes >= 64 * 1024 else buf)
    return out


def _starting(exc: OSError) -> bool:
    """The peer's host is up but nothing listens yet (a proc still starting)."""
    return isinstance(exc, (ConnectionRefusedError, FileNotFoundError))


def _hung_up(exc: OSError) -> bool:
    """The peer accepted, then closed the connection before the handshake ended."""
    if isinstance(exc, TlsRefused):
        return False  # our certificate was refused: trying again changes nothing
    return isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError))


def _retryable(exc: OSError) -> bool:
    """Worth trying again until the connect deadline: not listening yet, no route yet (a
    host still booting, a link coming back), or the peer closed the connection during the
    handshake (a starved peer's own handshake deadline, or its listener making room, ended
    it: the peer lives, and load must only slow things down)."""
    if isinstance(exc, TimeoutError):
        return False  # the handshake took the whole connect deadline
    return _hung_up(exc) or _starting(exc) or exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH)


_MIN_HANDSHAKE_S = 1.0  # the last attempt before the connect deadline still gets this long


def canonical(address: str) -> str:
    """The canonical text of an address, as peers announce it."""
    return str(Address.parse(address))
