"""One authenticated, framed connection between two runtimes: a composition of small parts.

We own the socket instead of using an asyncio transport (ADR 0001): any thread may write a
frame directly, and reads go straight into the frame decoder's buffers. The work is split
by concept, one module each:

=====================  ======================================================================
``_reader.Reader``     framing and the read loop: bytes in, whole frames out, control frames
``_writer.Writer``     direct writes, the write queue and its flushing, flow control (ADR 0012)
``_shm.Lending``       shared-memory lending both ways over a Unix socket (ADR 0009)
``_tls.TlsSession``    TLS over memory BIOs for tcp connections (ADR 0008)
``_borrowing``         borrowed reads: a thread blocked on a reply reads it itself (ADR 0010)
``Connection``         owns the socket, wires the parts, reads on the loop, closes once
=====================  ======================================================================

Reading happens on the loop (``add_reader``, or through a :class:`Poller` for plain
connections), under the read lock that a borrowing thread takes too. :meth:`throttle` stops
the loop from reading the connection (the receiving side's half of flow control: a mailbox
fed by it is too full), so the peer's kernel buffer and then its queue fill, and it slows.

The handshake (``regency._wire``) runs before this object exists: not one payload byte is
decoded from an unauthenticated peer. A protocol error closes the connection with one log
line and never reaches the runtime as an exception; a part that sees the connection end
reports an :data:`~regency._transport._reader.End` and the loop closes it, once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .._ratelog import RateLimitedLog
from .._wire import Destination
from . import _shm
from ._borrowing import Borrowing
from ._buffers import allocate_buffer
from ._poller import Poller
from ._reader import End, Reader
from ._tls import TlsSession
from ._writer import Writer

log = logging.getLogger("regency.transport")
closings = RateLimitedLog(log)  # a flood of bad frames on many connections: a few lines

FrameHandler = Callable[["Connection", Any], None]  # gets what ``decode`` made of a frame
CloseHandler = Callable[["Connection", BaseException | None], None]


class Connection:
    """A framed connection over a connected, authenticated, non-blocking socket."""

    def __init__(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        on_frame: FrameHandler,
        on_close: CloseHandler,
        *,
        peer_identity: str | None = None,
        label: str = "?",
        leftover: bytes = b"",
        allocate: Callable[[int], Destination] = allocate_buffer,
        tls: TlsSession | None = None,
        shm_min_bytes: int = 0,
        shm_pool: _shm.SegmentPool | None = None,
        poller: Poller | None = None,
        decode: Callable[[list[memoryview]], Any] | None = None,
    ) -> None:
        self.sock = sock
        self.loop = loop
        self._on_frame = on_frame
        self._on_close = on_close
        self.peer_identity = peer_identity
        self.label = label
        self.target: object = None
        self.closed = False
        self.throttled = False  # the loop does not read it (``throttle``)
        self.error: BaseException | None = None
        self.last_activity = time.monotonic()  # bytes moved either way: the peer is alive
        self._fd = sock.fileno()
        self._leftover = leftover
        self.loop_thread = threading.get_ident()  # connections are made on the loop thread
        self._tls = tls
        unix = sock.family == socket.AF_UNIX and tls is None
        self._lending = _shm.Lending(shm_pool, shm_min_bytes, label,
                                     _notifier(weakref.ref(self))) if unix else None
        self._reader = Reader(sock, self, allocate, self._lending, decode)
        self._writer = Writer(sock, loop, self, tls)
        self.writer = self._writer  # its outbound side (``Router.lines`` sends through it)
        self._borrowing = b = Borrowing(self, self._reader, poller if tls is None else None)
        # Borrowed reads, per message on both sides of a round trip: the borrowing's own
        # methods, bound here, so that a call goes straight to them (no Python layer between)
        #   read_here(take, waker, timeout, ready, paused=False, spin=0.0, guard=None):
        #       wait for and read this connection on the calling thread (see
        #       ``Borrowing.read_here``);
        #   pause_reads(): stop the loop from reading it until ``resume_reads`` (any
        #       thread); resume_reads(): undo it (a throttled connection stays paused);
        #   end_linger(): let the loop read it now if a borrow left it paused.
        self.read_here = b.read_here
        self.pause_reads = b.pause
        self.resume_reads = b.resume
        self.end_linger = b.end_linger
        # Writing (any thread): ``send_frame(buffers)`` writes one frame, in order with every
        # other frame of this connection; the writer's own method, bound here for the same
        # reason (see ``Writer.send_frame``: queueing, large buffers, shared memory).
        self._writer.lending = self._lending
        self.send_frame = self._writer.send_frame
        # Flow control before a call or a cast (ADR 0012): ``make_room()`` waits while the
        # write queue is above ``high_water`` (``Writer.make_room``; at once when it is not).
        self.make_room = self._writer.make_room

    def fileno(self) -> int:
        """The socket's file descriptor."""
        return self._fd

    def start(self) -> None:
        """Begin reading (loop thread)."""
        poller = self._borrowing.poller
        if poller is not None:
            poller.add(self)
        else:
            self.loop.add_reader(self._fd, self._on_readable)
        if self._leftover:
            data, self._leftover = self._leftover, b""
            end = self._reader.feed(data, self.deliver)
            if end is not None:
                self.end(end)

    # -- reading (loop thread) -------------------------------------------------------------
    def _on_readable(self) -> None:
        if self._tls is not None:
            end = self._reader.read_tls(self._tls, self.deliver)
        else:
            borrowing = self._borrowing
            lock = borrowing.lock
            if not lock.acquire(False):
                return  # a borrowing thread reads it now, and resumes us when it is done
            try:
                if borrowing.handback:
                    borrowing.give_back()
                end = self._reader.read(self.deliver)
            finally:
                lock.release()
        if end is not None:
            self.end(end)

    def deliver(self, frame: Any) -> None:
        """Hand a whole frame to the owner (loop thread)."""
        self._on_frame(self, frame)

    def end(self, end: End) -> None:
        """Act on how a read saw the connection end (loop thread)."""
        failed, exc = end
        if failed:
            assert exc is not None
            self._fail(exc)
        else:
            self._lost(exc)

    def on_loop(self) -> bool:
        """Whether the caller runs on the loop thread."""
        return threading.get_ident() == self.loop_thread

    def to_loop(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon (any thread; nothing once the loop is closed)."""
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is closed: the connection went with it

    # -- borrowed reads (``_borrowing``) ---------------------------------------------------
    @property
    def borrowable(self) -> bool:
        """Whether another thread may read it itself (``read_here``)."""
        return self._borrowing.borrowable

    @property
    def taken(self) -> int:
        """Frames borrowing threads took (statistics)."""
        return self._borrowing.taken

    @property
    def handed_back(self) -> int:
        """Frames borrowing threads read and gave back to the loop (statistics)."""
        return self._borrowing.handed_back

    # -- writing (``_writer``; ``send_frame`` is bound in ``__init__``) ---------------------
    def _send_releases(self) -> None:
        """Give the peer back the segments whose mappings died here (loop thread)."""
        assert self._lending is not None
        tokens = self._lending.take_releases()
        if tokens and not self.closed:
            try:
                self.send_frame(_shm.release_frame(tokens))
            except ConnectionResetError:
                pass

    # -- flow control (ADR 0012; ``_writer``) ----------------------------------------------
    @property
    def queued(self) -> int:
        """Bytes in the write queue."""
        return self._writer.queued

    @property
    def max_queued(self) -> int:
        """The most bytes the write queue held (statistics)."""
        return self._writer.max_queued

    @property
    def high_water(self) -> int:
        """Above this many queued bytes, ``make_room`` waits (set by the owner)."""
        return self._writer.high_water

    @high_water.setter
    def high_water(self, value: int) -> None:
        self._writer.high_water = value

    @property
    def loop_block_limit(self) -> float:
        """The longest ``make_room`` blocks the loop thread, in seconds."""
        return self._writer.loop_block_limit

    @loop_block_limit.setter
    def loop_block_limit(self, value: float) -> None:
        self._writer.loop_block_limit = value

    @property
    def blocked(self) -> int:
        """Waits in ``make_room`` (statistics)."""
        return self._writer.blocked

    @property
    def overrun(self) -> int:
        """Waits on the loop thread that gave up (statistics)."""
        return self._writer.overrun

    def throttle(self) -> None:
        """Stop the loop from reading this connection until ``unthrottle`` (loop thread).

        A hang-up is still seen: the inner ``epoll`` reports it whatever the registration.
        """
        if self.throttled or self.closed:
            return
        self.throttled = True
        poller = self._borrowing.poller
        if poller is not None:
            poller.pause(self)
        else:
            self.loop.remove_reader(self._fd)

    def unthrottle(self) -> None:
        """Undo ``throttle`` (loop thread)."""
        if not self.throttled:
            return
        self.throttled = False
        if self.closed:
            return
        poller = self._borrowing.poller
        if poller is not None:
            if not self._borrowing.borrowers:
                self._borrowing.resume()  # else the borrower lingers it, the sweep resumes it
        else:
            self.loop.add_reader(self._fd, self._on_readable)

    # -- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (loop thread); ``on_close`` follows."""
        self._lost(None)

    def fail(self, exc: BaseException) -> None:
        """Close the connection for ``exc`` (a frame that cannot be decoded, say), with one
        log line (loop thread)."""
        self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        closings.warning(type(exc).__name__, "regency: closing connection to %s: %s",
                         self.label, exc)
        self.error = exc
        self._lost(exc)

    def _lost(self, exc: BaseException | None) -> None:
        if self.closed:
            return
        self.closed = True
        self._borrowing.wake_all()
        try:
            poller = self._borrowing.poller
            if poller is not None:
                poller.remove(self)
            else:
                self.loop.remove_reader(self._fd)
            self._writer.stop()
        except Exception:
            pass
        with self._borrowing.lock:  # not under a borrower's read: its descriptor must stay ours
            self.sock.close()
        self._writer.drop()
        if self._lending is not None:
            self._lending.close()  # the peer may still map what it was lent: never reuse
        self._on_close(self, self.error or exc)


def _notifier(ref: weakref.ref[Connection]) -> Callable[[], None]:
    """What the lending calls when segments may be given back; it does not keep the
    connection alive."""

    def notify() -> None:
        conn = ref()
        if conn is not None:
            conn.to_loop(conn._send_releases)

    return notify
