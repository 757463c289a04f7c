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

The handshake (``regency._wire``) runs before this object exists: not one payload byte is
decoded from an unauthenticated peer. A protocol error closes the connection with one log
line and never reaches the runtime as an exception.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._wire import FrameDecoder, ProtocolError, encode_frame

log = logging.getLogger("regency.transport")

FrameHandler = Callable[["Connection", list[memoryview]], None]
CloseHandler = Callable[["Connection", BaseException | None], None]
_IOV_MAX = 512
_READS_PER_EVENT = 16


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
    ) -> None:
        self.sock = sock
        self.loop = loop
        self._on_frame = on_frame
        self._on_close = on_close
        self._decoder = FrameDecoder(allocate=allocate)
        self._wlock = threading.Lock()
        self._pending: collections.deque[memoryview] = collections.deque()
        self._writer_armed = False
        self.peer_identity = peer_identity
        self.label = label
        self.target: object = None
        self.closed = False
        self.error: BaseException | None = None
        self._fd = sock.fileno()
        self._leftover = leftover

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
        decoder = self._decoder
        recv_into = self.sock.recv_into
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
            try:
                decoder.buffer_updated(n)
            except ProtocolError as exc:
                self._fail(exc)
                return
            self._drain()
            if self.closed:
                break

    def _drain(self) -> None:
        next_frame = self._decoder.next_frame
        on_frame = self._on_frame
        while not self.closed:
            frame = next_frame()
            if frame is None:
                return
            on_frame(self, frame)

    # -- writing (any thread) --------------------------------------------------------------
    def send_frame(self, buffers: Sequence[Any]) -> None:
        """Write one frame; never blocks (what the kernel does not take is queued)."""
        parts = encode_frame(buffers)
        with self._wlock:
            if self.closed:
                raise ConnectionResetError(f"connection to {self.label} is closed")
            if self._pending:
                self._pending.extend(_views(parts))
                return
            try:
                sent = self.sock.sendmsg(parts) if len(parts) <= _IOV_MAX else 0
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self.loop.call_soon_threadsafe(self._lost, exc)
                raise ConnectionResetError(f"connection to {self.label} broke: {exc}") from exc
            rest = _skip(parts, sent)
            if rest:
                self._pending.extend(rest)
                self._arm_writer()

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
            while self._pending:
                batch = [self._pending[i] for i in range(min(len(self._pending), _IOV_MAX))]
                try:
                    sent = self.sock.sendmsg(batch)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as exc:
                    self._pending.clear()
                    self.loop.call_soon(self._lost, exc)
                    return
                while sent and self._pending:
                    head = self._pending[0]
                    if sent >= head.nbytes:
                        sent -= head.nbytes
                        self._pending.popleft()
                    else:
                        self._pending[0] = head[sent:]
                        sent = 0
                if self._pending:
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
        self._on_close(self, self.error or exc)


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
