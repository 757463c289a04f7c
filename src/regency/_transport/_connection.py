"""One authenticated, framed connection between two runtimes.

Theory of operation
-------------------
We own the socket instead of using an asyncio transport, for two reasons measured on the
hot path: (1) any thread may write a frame *directly* (under a lock, with one ``sendmsg``
of the prefix and the uncopied buffers) so a blocking caller does not pay a thread hop to
the loop to send; (2) reads go straight into the frame decoder's buffers (``recv_into``),
so large out-of-band buffers land in their final ``bytearray`` with no extra copy.

Reading happens on the loop (``add_reader``, or through a :class:`Poller` for plain
connections), except that a thread blocked on a reply may *borrow* a polled connection
(``read_here``): it pauses the loop's reading, reads under the read lock itself, keeps the
frames it was waiting for and hands the rest back to the loop in order (see ``_poller``).

Writing: if nothing is queued, the writer sends what the kernel takes right away; whatever
is left (a partial send, or the socket buffer full) is queued, in order, and the loop
flushes it with ``add_writer``. A writer that finds a queue writes it first itself, so what
is sent leaves however long the loop takes to come round to its writer callback (a loop
busy with inbound work). Frames written under the lock never interleave, so per-sender
order is the send order.

Flow control (ADR 0012): ``queued`` counts the bytes waiting in the write queue.
:meth:`make_room` is what a sender of a flow-controlled message calls first: above
``high_water`` it waits, writing the queue itself with the GIL released, until the queue is
down to half the mark (on the loop thread for at most ``loop_block_limit`` seconds). Replies
and system messages never call it. :meth:`throttle` stops the loop from reading the
connection (the receiving side's half: a mailbox fed by it is too full), so the peer's
kernel buffer and then its queue fill, and it slows.

Over a Unix socket, buffers of at least ``shm_min_bytes`` go through shared memory instead
of the stream (:mod:`._shm`): the frame carries small attachment descriptors and the
segment's file descriptor travels with the frame's first bytes (``SCM_RIGHTS``). Received
descriptors queue in arrival order; a frame with attachments takes its segments from the
front of that queue, which is correct because a descriptor arrives no later than the first
byte it was sent with (and the handshake never reads past its own messages, so a frame sent
right behind it keeps its descriptors).

The handshake (``regency._wire``) runs before this object exists: not one payload byte is
decoded from an unauthenticated peer. A protocol error closes the connection with one log
line and never reaches the runtime as an exception.
"""

from __future__ import annotations

import array
import asyncio
import collections
import logging
import os
import select
import socket
import ssl
import struct
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pickle import PickleBuffer
from typing import Any

from .._wire import Attachment, FrameDecoder, ProtocolError, encode_frame
from . import _shm
from ._poller import Poller, Waker
from ._tls import TlsSession

log = logging.getLogger("regency.transport")

FrameHandler = Callable[["Connection", Any], None]  # gets what ``decode`` made of a frame
CloseHandler = Callable[["Connection", BaseException | None], None]
_IOV_MAX = 512
_READS_PER_EVENT = 16
_ANC_SPACE = socket.CMSG_SPACE(253 * 4)  # room for the most descriptors one message carries
_RECV_FLAGS = getattr(socket, "MSG_CMSG_CLOEXEC", 0)


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
        allocate: Callable[[int], bytearray] = bytearray,
        tls: TlsSession | None = None,
        shm_min_bytes: int = 0,
        shm_pool: _shm.SegmentPool | None = None,
        poller: Poller | None = None,
        decode: Callable[[list[memoryview]], Any] | None = None,
    ) -> None:
        self.sock = sock
        self._decode = decode  # a frame's header, decoded once here for every consumer
        self.loop = loop
        self._on_frame = on_frame
        self._on_close = on_close
        self._unix = sock.family == socket.AF_UNIX and tls is None
        self._pool = shm_pool
        self._shm_min = shm_min_bytes if self._unix and shm_pool is not None else 0
        self._releases: list[int] = []
        self._release_hook = _release_hook(weakref.ref(self))
        self._fdq: collections.deque[int] = collections.deque()  # received, not yet used
        self._decoder = FrameDecoder(allocate=allocate, attachments=self._unix)
        self._wlock = threading.Lock()
        self._pending: collections.deque[Any] = collections.deque()
        self._writer_armed = False
        self.peer_identity = peer_identity
        self.label = label
        self.target: object = None
        self.closed = False
        self.error: BaseException | None = None
        self._fd = sock.fileno()
        self._leftover = leftover
        self._loop_thread = threading.get_ident()  # connections are made on the loop thread
        self._tls = tls
        self.last_activity = time.monotonic()  # bytes moved either way: the peer is alive
        self._poller = poller if tls is None else None
        self._rlock = threading.RLock()  # held while reading: by the loop or a borrower
        self._handback: collections.deque[Any] = collections.deque()
        self._borrowers: list[Waker] = []  # threads waiting to read it themselves
        self._ending = False  # a borrower saw it end; the loop closes it
        self.taken = 0  # frames borrowers took (statistics)
        self.queued = 0  # bytes in the write queue (flow control)
        self.max_queued = 0  # the most it held (statistics)
        self.high_water: int = _NO_LIMIT  # above it, ``make_room`` waits (set by the owner)
        self.loop_block_limit = 1.0  # the longest ``make_room`` blocks the loop thread
        self.throttled = False  # the loop does not read it (``throttle``)
        self.blocked = 0  # waits in ``make_room`` (statistics)
        self.overrun = 0  # waits on the loop thread that gave up (statistics)

    def fileno(self) -> int:
        """The socket's file descriptor."""
        return self._fd

    def start(self) -> None:
        """Begin reading (loop thread)."""
        if self._poller is not None:
            self._poller.add(self)
        else:
            self.loop.add_reader(self._fd, self._on_readable)
        if self._leftover:
            data, self._leftover = self._leftover, b""
            try:
                self._decoder.feed(data)
                end = self._drain(self._deliver)
            except ProtocolError as exc:
                end = (True, exc)
            if end is not None:
                self._end(end)

    # -- reading (loop thread) -------------------------------------------------------------
    def _on_readable(self) -> None:
        if self._tls is not None:
            self._on_readable_tls()
            return
        if not self._rlock.acquire(False):
            return  # a borrowing thread reads it now, and resumes us when it is done
        try:
            if self._handback:
                self._give_back()
            end = self._read(self._deliver)
        finally:
            self._rlock.release()
        if end is not None:
            self._end(end)

    def _deliver(self, item: Any) -> None:
        self._on_frame(self, item)

    def _end(self, end: tuple[bool, BaseException | None]) -> None:
        failed, exc = end
        if failed:
            assert exc is not None
            self._fail(exc)
        else:
            self._lost(exc)

    def _read(self, sink: Callable[[Any], None],
              reads: int = _READS_PER_EVENT) -> tuple[bool, BaseException | None] | None:
        """Read what is there and pass each whole frame to ``sink`` (read lock held).

        Returns how the connection ended, if it did: ``(failed, exc)``, for the loop to act on.
        """
        decoder = self._decoder
        recv_into = self._recv_unix if self._unix else self.sock.recv_into
        for _ in range(reads):
            try:
                view = decoder.get_buffer(-1)
                n = recv_into(view)
            except (BlockingIOError, InterruptedError):
                break
            except ProtocolError as exc:
                return (True, exc)
            except OSError as exc:
                return (False, exc)
            if n == 0:
                return (False, None)
            self.last_activity = time.monotonic()
            try:
                decoder.buffer_updated(n)
            except ProtocolError as exc:
                return (True, exc)
            end = self._drain(sink)
            if end is not None:
                return end
            if self.closed or self.throttled or (n < len(view) and n < _SMALL):
                break  # a short read drained the socket: skip the extra recv and its EAGAIN
        return None

    def _recv_unix(self, view: memoryview) -> int:
        n, ancillary, flags, _ = self.sock.recvmsg_into([view], _ANC_SPACE, _RECV_FLAGS)
        if ancillary:
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
                    self._fdq.extend(fds)
            if flags & socket.MSG_CTRUNC:
                raise ProtocolError("file descriptors sent with a frame were cut off")
        return n

    def _on_readable_tls(self) -> None:
        assert self._tls is not None
        try:
            data = self.sock.recv(1 << 18)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        if not data:
            self._lost(None)
            return
        try:
            plain = self._tls.decrypt(data)
            if plain:
                self._decoder.feed(plain)
                end = self._drain(self._deliver)
                if end is not None:
                    self._end(end)
        except (ProtocolError, ssl.SSLError) as exc:
            self._fail(exc)

    def _drain(self, sink: Callable[[Any], None]
               ) -> tuple[bool, BaseException | None] | None:
        next_frame = self._decoder.next_frame
        decode = self._decode
        unix = self._unix
        while not self.closed:
            frame = next_frame()
            if frame is None:
                return None
            if unix:
                if not frame[0]:
                    if not self._control(frame):
                        return (True, ProtocolError("malformed connection control frame"))
                    continue
                if any(type(b) is Attachment for b in frame):
                    try:
                        frame = self._resolve(frame)
                    except _shm.ShmError as exc:
                        return (True, ProtocolError(str(exc)))
            if decode is None:
                sink(frame)
                continue
            try:
                item = decode(frame)
            except ProtocolError as exc:
                return (True, exc)
            sink(item)
        return None

    def _resolve(self, frame: list[Any]) -> list[memoryview]:
        """Replace a frame's attachments by views of the shared memory they name."""
        fdq = self._fdq
        views = iter(_shm.resolve([b.descriptor for b in frame if type(b) is Attachment],
                                  lambda: fdq.popleft() if fdq else None,
                                  self._release_hook))
        return [next(views) if type(b) is Attachment else b for b in frame]

    def _control(self, frame: list[memoryview]) -> bool:
        """A frame for this connection itself (empty header): segments given back."""
        if len(frame) != 2 or frame[1].nbytes % 8:
            return False
        tokens = struct.unpack(f"!{frame[1].nbytes // 8}Q", frame[1])
        if self._pool is not None:
            self._pool.release(tokens, self)
        return True

    # -- reading on a borrowing thread -----------------------------------------------------
    @property
    def borrowable(self) -> bool:
        """Whether another thread may read it itself (``read_here``)."""
        return self._poller is not None and not self.closed and not self._ending

    def pause_reads(self) -> bool:
        """Stop the loop from reading this connection until ``resume_reads`` (any thread)."""
        poller = self._poller
        return poller is not None and not self.closed and poller.pause(self)

    def resume_reads(self) -> None:
        """Undo ``pause_reads`` (a throttled connection stays paused)."""
        if self._poller is not None and not self.throttled:
            self._poller.resume(self)

    def read_here(self, take: Callable[[Any], bool], waker: Waker,
                  timeout: float | None, ready: Callable[[], bool],
                  paused: bool = False, spin: float = 0.0,
                  guard: AbstractContextManager[Any] | None = None) -> bool:
        """Wait for and read this connection on the calling thread, not the loop's.

        Whole frames (as ``decode`` made them) go to ``take`` in arrival order while it
        accepts them (returns True); from the first it declines on, the rest go to the loop,
        in order, as if the loop had read them. ``take`` runs under the read lock: it must
        only keep frames, never block.
        Returns after one read, a ``waker.wake()`` or ``timeout`` (the caller loops), and
        without reading when ``ready()`` is true once the loop cannot read any more (what
        the loop read before must be handled first). Returns False when this connection
        cannot be borrowed (TLS, closed, ended, not polled, or called on the loop thread).
        ``paused``: the caller paused it already (``pause_reads``); it is resumed either way.
        ``spin``: seconds to poll before sleeping (:meth:`Waker.wait`). ``guard``: a context
        entered around the read itself (e.g. deferring interrupts: a frame read must not be
        lost to an exception before it is kept).
        """
        poller = self._poller
        if poller is None or self.closed or self._ending or self._on_loop():
            if paused:
                self.resume_reads()
            return False
        if not paused and not poller.pause(self):
            return False
        self._borrowers.append(waker)
        try:
            with self._rlock:  # a read the loop began before the pause ends first
                if ready() or self.closed:
                    return True
            if not waker.wait(self._fd, timeout, spin):
                return True
            with self._rlock:
                if self.closed or ready():  # e.g. frames handed back were delivered since:
                    return True             # what we would read must come after them
                if guard is None:
                    end = self._read(_Taker(self, take), 1)
                else:
                    with guard:
                        end = self._read(_Taker(self, take), 1)
        finally:
            self._borrowers.remove(waker)
            if not self.throttled:
                poller.resume(self)
            if self._handback:
                self._to_loop(self._give_back_soon)
        if end is not None:
            self._ending = True  # from now on, only the loop reads it
            if end != (False, None):  # an end of stream stays readable: the loop sees it too
                self._to_loop(self._end, end)
        return True

    def _to_loop(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is closed: the connection went with it

    def _give_back_soon(self) -> None:
        # a borrower holds the lock only for moments (never while it waits or runs a handler)
        with self._rlock:
            self._give_back()

    def _give_back(self) -> None:
        """Deliver frames handed back by a borrower (loop thread, read lock held)."""
        handback = self._handback
        while handback and not self.closed:
            self._deliver(handback.popleft())

    def _released(self, token: int) -> None:
        """A mapping of a segment the peer lent us died (any thread): give it back."""
        self._releases.append(token)
        try:
            self.loop.call_soon_threadsafe(self._send_releases)
        except RuntimeError:
            pass  # the loop is closed: the connection is gone too

    def _send_releases(self) -> None:
        tokens, self._releases = self._releases, []
        if tokens and not self.closed:
            try:
                self.send_frame([b"", struct.pack(f"!{len(tokens)}Q", *tokens)])
            except ConnectionResetError:
                pass

    # -- writing (any thread) --------------------------------------------------------------
    def send_frame(self, buffers: Sequence[Any]) -> None:
        """Write one frame, in order with every other frame of this connection.

        What the kernel does not take at once is queued and written by the loop. The caller's
        large buffers must not change until they are written, since they are not copied: a
        caller on another thread waits until then (like a blocking send); on the loop thread,
        where waiting is impossible, the unsent part of large buffers is copied instead.
        """
        lent: _shm.Lent | None = None
        if self._shm_min and len(buffers) > 1 and not self.closed:
            buffers, lent = self._share(buffers)
        try:
            self._send(buffers, lent)
        except BaseException:
            if lent is not None and not lent.queued:
                self._unlend(lent)
            raise

    def _share(self, buffers: Sequence[Any]) -> tuple[Sequence[Any], _shm.Lent | None]:
        """Move the frame's large buffers into one shared-memory segment, if any."""
        big = []
        views = []
        limit = self._shm_min
        for i in range(1, len(buffers)):
            buf = buffers[i]
            if type(buf) is bytes and len(buf) < limit:
                continue  # the common case (a small pickle), without making a view
            view = memoryview(buf)
            if view.nbytes >= limit and view.c_contiguous:
                big.append(i)
                views.append(view if view.format == "B" and view.ndim == 1 else
                             PickleBuffer(view).raw())  # any format, flat bytes
        if not big:
            return buffers, None
        assert self._pool is not None
        try:
            lent = self._pool.lend(views, self)
        except OSError as exc:
            log.warning("regency: shared memory unavailable (%s); sending through the "
                        "socket to %s from now on", exc, self.label)
            self._shm_min = 0
            return buffers, None
        out = list(buffers)
        for i, descriptor in zip(big, lent.descriptors):
            out[i] = descriptor
        lent.attached = big
        return out, lent

    def _unlend(self, lent: _shm.Lent) -> None:
        """A lent segment that never reached the peer goes back (or, one-off, away)."""
        lent.close()
        if lent.token and self._pool is not None:
            if self.closed:
                self._pool.forget(self)  # the connection died under the send: nothing reuses it
            else:
                self._pool.release([lent.token], self)

    def _send(self, buffers: Sequence[Any], lent: _shm.Lent | None) -> None:
        parts = encode_frame(buffers, lent.attached if lent is not None else ())
        done: threading.Event | None = None
        with self._wlock:
            if self._tls is not None:
                parts = [self._tls.encrypt(b"".join(parts))]  # TLS: one encrypted copy
            if self.closed:
                raise ConnectionResetError(f"connection to {self.label} is closed")
            if self._pending:
                self._flush()  # the queue first, now: the loop may be busy for a while
            if self._pending:
                rest = _views(parts)
            else:
                try:
                    if len(parts) > _IOV_MAX:
                        sent = 0
                    elif lent is not None:
                        sent = self.sock.sendmsg(parts, _ancillary(lent))
                    else:
                        sent = self.sock.sendmsg(parts)
                except (BlockingIOError, InterruptedError):
                    sent = 0
                except OSError as exc:
                    self.loop.call_soon_threadsafe(self._lost, exc)
                    raise ConnectionResetError(f"connection to {self.label} broke: {exc}") from exc
                if sent and lent is not None:
                    lent.close()  # it went with the first bytes: the kernel holds it now
                    lent = None
                rest = _skip(parts, sent)
                if not rest:
                    return
            if lent is not None:
                lent.queued = True
                self._pending.append(lent)
            if _borrows(rest):
                if self._on_loop():
                    rest = [_own(v) for v in rest]
                else:
                    done = threading.Event()
            self._pending.extend(rest)
            self.queued += sum(v.nbytes for v in rest)
            if self.queued > self.max_queued:
                self.max_queued = self.queued
            if done is not None:
                self._pending.append(_Flushed(done))
            self._arm_writer()
        if done is not None:
            while not done.wait(1.0):
                if self.closed:
                    return  # lost: the frame is gone either way

    def _on_loop(self) -> bool:
        return threading.get_ident() == self._loop_thread

    def _arm_writer(self) -> None:
        if self._writer_armed:
            return
        self._writer_armed = True
        self.loop.call_soon_threadsafe(self._add_writer)

    def _add_writer(self) -> None:
        if not self.closed:
            self.loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        with self._wlock:
            if self._flush():
                self._writer_armed = False
                self.loop.remove_writer(self._fd)

    def _flush(self) -> bool:
        """Write what the queue holds until the kernel takes no more (write lock held, any
        thread). Returns whether the queue is empty now."""
        pending = self._pending
        while pending:
            batch: list[memoryview] = []
            fds: _shm.Lent | None = None
            for item in pending:
                kind = type(item)
                if kind is _shm.Lent:
                    if batch:
                        break  # its descriptor goes with the first byte of its frame
                    fds = item
                    continue
                if kind is _Flushed or len(batch) == _IOV_MAX:
                    break
                batch.append(item)
            sent = 0
            if batch:
                try:
                    if fds is not None:
                        sent = self.sock.sendmsg(batch, _ancillary(fds))
                    else:
                        sent = self.sock.sendmsg(batch)
                except (BlockingIOError, InterruptedError):
                    return False
                except OSError as exc:
                    self._to_loop(self._lost, exc)
                    return False
                self.last_activity = time.monotonic()
                self.queued -= sent
            while pending:
                head = pending[0]
                if isinstance(head, _Flushed):
                    head.event.set()
                    pending.popleft()
                    continue
                if isinstance(head, _shm.Lent):
                    if head is not fds or not sent:
                        break
                    head.close()
                    pending.popleft()
                    continue
                if sent >= head.nbytes:
                    sent -= head.nbytes
                    pending.popleft()
                    continue
                if sent:
                    pending[0] = head[sent:]
                break
            if pending and not isinstance(pending[0], _Flushed) and sent == 0 and batch:
                return False  # the kernel buffer is full again; wait for the next event
        return True

    # -- flow control ----------------------------------------------------------------------
    def make_room(self) -> None:
        """Wait while the write queue is above ``high_water`` (any thread; flow control).

        Called before sending a message that may wait (a call or a cast; never a reply or a
        system message). The caller writes the queue itself while it waits, with the GIL
        released between writes, until the queue is down to half the mark or the connection
        closes. On the loop thread nothing else runs meanwhile, so there the wait ends after
        ``loop_block_limit`` seconds at the latest (a way out of two loops each waiting for
        the other to read); the message is then queued above the mark.
        """
        if self.queued <= self.high_water:
            return
        self.blocked += 1
        low = self.high_water // 2
        deadline = time.monotonic() + self.loop_block_limit if self._on_loop() else None
        poll = select.poll()
        poll.register(self._fd, select.POLLOUT)
        while True:
            with self._wlock:
                if self.closed:
                    return
                if self._pending:
                    self._flush()
                if self.queued <= low:
                    return
            wait = _ROOM_POLL_S
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    self.overrun += 1
                    if self.overrun == 1:
                        log.warning("regency: the event loop waited %.1fs for room to send "
                                    "to %s; queueing above the high-water mark",
                                    self.loop_block_limit, self.label)
                    return
            try:
                poll.poll(int(wait * 1000) + 1)
            except OSError:
                return

    def throttle(self) -> None:
        """Stop the loop from reading this connection until ``unthrottle`` (loop thread).

        A hang-up is still seen: the inner ``epoll`` reports it whatever the registration.
        """
        if self.throttled or self.closed:
            return
        self.throttled = True
        if self._poller is not None:
            self._poller.pause(self)
        else:
            self.loop.remove_reader(self._fd)

    def unthrottle(self) -> None:
        """Undo ``throttle`` (loop thread)."""
        if not self.throttled:
            return
        self.throttled = False
        if self.closed:
            return
        if self._poller is not None:
            if not self._borrowers:
                self._poller.resume(self)  # else the borrower resumes it when it is done
        else:
            self.loop.add_reader(self._fd, self._on_readable)

    # -- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (loop thread); ``on_close`` follows."""
        self._lost(None)

    def _fail(self, exc: BaseException) -> None:
        log.warning("regency: closing connection to %s: %s", self.label, exc)
        self.error = exc
        self._lost(exc)

    def _lost(self, exc: BaseException | None) -> None:
        if self.closed:
            return
        self.closed = True
        for borrower in list(self._borrowers):
            borrower.wake()  # it must not sit on a socket about to be closed
        try:
            if self._poller is not None:
                self._poller.remove(self)
            else:
                self.loop.remove_reader(self._fd)
            self.loop.remove_writer(self._fd)
        except Exception:
            pass
        with self._rlock:  # not under a borrower's read: its descriptor must stay ours
            self.sock.close()
        with self._wlock:
            for item in self._pending:
                if isinstance(item, _Flushed):
                    item.event.set()
                elif isinstance(item, _shm.Lent):
                    item.close()
            self._pending.clear()
            self.queued = 0
            while self._fdq:
                os.close(self._fdq.popleft())
        if self._pool is not None:
            self._pool.forget(self)  # the peer may still map what it was lent: never reuse
        self._on_close(self, self.error or exc)


def _ancillary(lent: _shm.Lent) -> list[tuple[int, int, bytes]]:
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [lent.fd]).tobytes())]


def _release_hook(ref: weakref.ref[Connection]) -> Callable[[int], None]:
    """What a received segment's finaliser calls; it does not keep the connection alive."""

    def release(token: int) -> None:
        conn = ref()
        if conn is not None:
            conn._released(token)

    return release


class _Taker:
    """The sink of a borrowed read: frames to ``take`` until it declines one, then back."""

    __slots__ = ("conn", "declined", "take")

    def __init__(self, conn: Connection, take: Callable[[Any], bool]) -> None:
        self.conn = conn
        self.take = take
        self.declined = bool(conn._handback)  # frames still to give back go first

    def __call__(self, item: Any) -> None:
        if not self.declined and self.take(item):
            self.conn.taken += 1
            return
        self.declined = True
        self.conn._handback.append(item)  # the loop delivers it, in order (see read_here)


class _Flushed:
    """A marker in the write queue: everything before it has been written."""

    __slots__ = ("event",)

    def __init__(self, event: threading.Event) -> None:
        self.event = event


_SMALL = 64 * 1024
_NO_LIMIT = 1 << 62
_ROOM_POLL_S = 0.1  # a waiting sender looks at ``closed`` at least this often


def _borrows(views: list[memoryview]) -> bool:
    """Whether unsent data still points into a large caller-owned buffer."""
    return any(v.nbytes >= _SMALL and not isinstance(v.obj, bytes) for v in views)


def _own(view: memoryview) -> memoryview:
    if view.nbytes >= _SMALL and not isinstance(view.obj, bytes):
        return memoryview(view.tobytes())
    return view


def _views(parts: Sequence[Any]) -> list[memoryview]:
    return [p if isinstance(p, memoryview) else memoryview(p) for p in parts]


def _skip(parts: Sequence[Any], sent: int) -> list[memoryview]:
    """The parts of ``parts`` not covered by the first ``sent`` bytes, as views (no copies)."""
    for i, part in enumerate(parts):
        n = len(part) if type(part) is bytes else part.nbytes
        if sent < n:
            head = memoryview(part)[sent:] if sent else memoryview(part)
            return [head, *_views(parts[i + 1:])]
        sent -= n
    return []
