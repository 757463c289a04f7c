"""One authenticated, framed connection between two runtimes.

Theory of operation
-------------------
We own the socket instead of using an asyncio transport, for two reasons measured on the
hot path: (1) any thread may write a frame *directly* (under a lock, with one ``sendmsg``
of the prefix and the uncopied buffers) so a blocking caller does not pay a thread hop to
the loop to send; (2) reads go straight into the frame decoder's buffers (``recv_into``),
so large out-of-band buffers land in their final ``bytearray`` with no extra copy.

Reading happens only on the loop (``add_reader``). Writing: if nothing is queued, the
writer sends what the kernel takes right away; whatever is left (a partial send, or the
socket buffer full) is queued, in order, and the loop flushes it with ``add_writer``.
Frames written under the lock never interleave, so per-sender order is the send order.

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
import socket
import ssl
import struct
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pickle import PickleBuffer
from typing import Any

from .._wire import Attachment, FrameDecoder, ProtocolError, encode_frame
from . import _shm
from ._tls import TlsSession

log = logging.getLogger("regency.transport")

FrameHandler = Callable[["Connection", list[memoryview]], None]
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
    ) -> None:
        self.sock = sock
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

    def start(self) -> None:
        """Begin reading (loop thread)."""
        self.loop.add_reader(self._fd, self._on_readable)
        if self._leftover:
            data, self._leftover = self._leftover, b""
            try:
                self._decoder.feed(data)
                self._drain()
            except ProtocolError as exc:
                self._fail(exc)

    # -- reading (loop thread) -------------------------------------------------------------
    def _on_readable(self) -> None:
        if self._tls is not None:
            self._on_readable_tls()
            return
        decoder = self._decoder
        recv_into = self._recv_unix if self._unix else self.sock.recv_into
        for _ in range(_READS_PER_EVENT):
            try:
                view = decoder.get_buffer(-1)
                n = recv_into(view)
            except (BlockingIOError, InterruptedError):
                break
            except ProtocolError as exc:
                self._fail(exc)
                return
            except OSError as exc:
                self._lost(exc)
                return
            if n == 0:
                self._lost(None)
                return
            self.last_activity = time.monotonic()
            try:
                decoder.buffer_updated(n)
            except ProtocolError as exc:
                self._fail(exc)
                return
            self._drain()
            if self.closed or (n < len(view) and n < _SMALL):
                break  # a short read drained the socket: skip the extra recv and its EAGAIN

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
                self._drain()
        except (ProtocolError, ssl.SSLError) as exc:
            self._fail(exc)

    def _drain(self) -> None:
        next_frame = self._decoder.next_frame
        on_frame = self._on_frame
        unix = self._unix
        while not self.closed:
            frame = next_frame()
            if frame is None:
                return
            if unix:
                if not frame[0]:
                    self._control(frame)
                    continue
                if any(type(b) is Attachment for b in frame):
                    frame = self._resolve(frame)
                    if frame is None:
                        return
            on_frame(self, frame)

    def _resolve(self, frame: list[Any]) -> list[memoryview] | None:
        """Replace a frame's attachments by views of the shared memory they name."""
        fdq = self._fdq
        try:
            views = iter(_shm.resolve([b.descriptor for b in frame if type(b) is Attachment],
                                      lambda: fdq.popleft() if fdq else None,
                                      self._release_hook))
        except _shm.ShmError as exc:
            self._fail(ProtocolError(str(exc)))
            return None
        return [next(views) if type(b) is Attachment else b for b in frame]

    def _control(self, frame: list[memoryview]) -> None:
        """A frame for this connection itself (empty header): segments given back."""
        if len(frame) != 2 or frame[1].nbytes % 8:
            self._fail(ProtocolError("malformed connection control frame"))
            return
        tokens = struct.unpack(f"!{frame[1].nbytes // 8}Q", frame[1])
        if self._pool is not None:
            self._pool.release(tokens, self)

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
        if self._shm_min and len(buffers) > 1:
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
                        return
                    except OSError as exc:
                        self.loop.call_soon(self._lost, exc)
                        return
                    self.last_activity = time.monotonic()
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
                    return  # the kernel buffer is full again; wait for the next event
            self._writer_armed = False
            self.loop.remove_writer(self._fd)

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
        try:
            self.loop.remove_reader(self._fd)
            self.loop.remove_writer(self._fd)
        except Exception:
            pass
        self.sock.close()
        with self._wlock:
            for item in self._pending:
                if isinstance(item, _Flushed):
                    item.event.set()
                elif isinstance(item, _shm.Lent):
                    item.close()
            self._pending.clear()
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


class _Flushed:
    """A marker in the write queue: everything before it has been written."""

    __slots__ = ("event",)

    def __init__(self, event: threading.Event) -> None:
        self.event = event


_SMALL = 64 * 1024


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
