"""The outbound side of one connection: direct writes, the write queue, flow control.

Any thread may write a frame *directly* (under the write lock, with one ``sendmsg`` of the
prefix and the uncopied buffers; ADR 0001): a blocking caller does not pay a thread hop to
the loop to send. If nothing is queued, the writer sends what the kernel takes right away;
whatever is left (a partial send, or the socket buffer full) is queued, in order, and the
loop flushes it with ``add_writer``. A writer that finds a queue writes it first itself, so
what is sent leaves however long the loop takes to come round to its writer callback (a
loop busy with inbound work). Frames written under the lock never interleave, so per-sender
order is the send order.

Flow control (ADR 0012): ``queued`` counts the bytes waiting in the write queue.
:meth:`Writer.make_room` is what a sender of a flow-controlled message calls first: above
``high_water`` it waits, writing the queue itself with the GIL released, until the queue is
down to half the mark (on the loop thread for at most ``loop_block_limit`` seconds). Replies
and system messages never call it.

A frame that lends shared memory (:class:`~regency._transport._shm.Lent`) passes the
segment's descriptor with its first bytes; in the queue the ``Lent`` sits right before them.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from .._wire import encode_frame
from . import _shm
from ._tls import TlsSession

__all__ = ["NO_LIMIT", "Writer"]

log = logging.getLogger("regency.transport")

NO_LIMIT: Final = 1 << 62
_IOV_MAX: Final = 512
_SMALL: Final = 64 * 1024  # unsent views of caller buffers at least this large are not copied
_ROOM_POLL_S: Final = 0.1  # a waiting sender looks at ``closed`` at least this often


class Owner(Protocol):
    """What the writer needs of its connection."""

    closed: bool
    label: str
    last_activity: float

    def on_loop(self) -> bool: ...

    def to_loop(self, fn: Callable[..., None], *args: Any) -> None: ...

    def _lost(self, exc: BaseException | None) -> None: ...


class Writer:
    """Writes the frames of one connection, in order, from any thread."""

    __slots__ = ("_armed", "_fd", "_lock", "_loop", "_owner", "_pending", "_tls", "blocked",
                 "high_water", "lending", "loop_block_limit", "max_queued", "overrun", "queued",
                 "sock")

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, owner: Owner,
                 tls: TlsSession | None = None) -> None:
        self.sock = sock
        self._fd = sock.fileno()
        self._loop = loop
        self._owner = owner
        self._tls = tls
        self._lock = threading.Lock()
        self._pending: collections.deque[Any] = collections.deque()
        self._armed = False  # the loop's writer callback is (about to be) registered
        self.queued = 0  # bytes in the write queue (flow control)
        self.max_queued = 0  # the most it held (statistics)
        self.high_water: int = NO_LIMIT  # above it, ``make_room`` waits (set by the owner)
        self.loop_block_limit = 1.0  # the longest ``make_room`` blocks the loop thread
        self.blocked = 0  # waits in ``make_room`` (statistics)
        self.overrun = 0  # waits on the loop thread that gave up (statistics)
        self.lending: _shm.Lending | None = None  # large buffers through shared memory (Unix)

    def send_frame(self, buffers: Sequence[Any]) -> None:
        """Write one frame, in order with every other frame of this connection (any thread).

        What the kernel does not take at once is queued and written by the loop. The caller's
        large buffers must not change until they are written, since they are not copied: a
        caller on another thread waits until then (like a blocking send); on the loop thread,
        where waiting is impossible, the unsent part of large buffers is copied instead.
        Over a Unix socket (``lending``), buffers of at least ``shm_min_bytes`` go through
        shared memory. Raises ``ConnectionResetError`` when the connection is closed.
        """
        lending = self.lending
        if (lending is None or len(buffers) < 2 or self._owner.closed
                or (len(buffers) == 2 and type(buffers[1]) is bytes
                    and len(buffers[1]) < lending.min_bytes)  # a small pickle: most frames
                or not lending.min_bytes):
            self.send(buffers)
            return
        buffers, lent = lending.share(buffers)
        try:
            self.send(buffers, lent)
        except BaseException:
            if lent is not None and not lent.queued:
                lending.unlend(lent, self._owner.closed)
            raise

    def send(self, buffers: Sequence[Any], lent: _shm.Lent | None = None) -> None:
        """Write one frame (any thread), ``lent``: its buffers already in shared memory; see
        ``send_frame``.

        Raises ``ConnectionResetError`` when the connection is (or just got) closed.
        """
        parts = encode_frame(buffers, lent.attached if lent is not None else ())
        owner = self._owner
        done: threading.Event | None = None
        with self._lock:
            if self._tls is not None:
                parts = [self._tls.encrypt(b"".join(parts))]  # TLS: one encrypted copy
            if owner.closed:
                raise ConnectionResetError(f"connection to {owner.label} is closed")
            if self._pending:
                self._flush()  # the queue first, now: the loop may be busy for a while
            if self._pending:
                rest = _views(parts)
            else:
                try:
                    if len(parts) > _IOV_MAX:
                        sent = 0
                    elif lent is not None:
                        sent = self.sock.sendmsg(parts, _shm.ancillary(lent))
                    else:
                        sent = self.sock.sendmsg(parts)
                except (BlockingIOError, InterruptedError):
                    sent = 0
                except OSError as exc:
                    self._loop.call_soon_threadsafe(owner._lost, exc)
                    raise ConnectionResetError(
                        f"connection to {owner.label} broke: {exc}") from exc
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
                if owner.on_loop():
                    rest = [_own(v) for v in rest]
                else:
                    done = threading.Event()
            self._pending.extend(rest)
            self.queued += sum(v.nbytes for v in rest)
            if self.queued > self.max_queued:
                self.max_queued = self.queued
            if done is not None:
                self._pending.append(_Flushed(done))
            self._arm()
        if done is not None:
            while not done.wait(1.0):
                if owner.closed:
                    return  # lost: the frame is gone either way

    def _arm(self) -> None:
        if self._armed:
            return
        self._armed = True
        self._loop.call_soon_threadsafe(self._add_writer)

    def _add_writer(self) -> None:
        if not self._owner.closed:
            self._loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        with self._lock:
            if self._flush():
                self._armed = False
                self._loop.remove_writer(self._fd)

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
                        sent = self.sock.sendmsg(batch, _shm.ancillary(fds))
                    else:
                        sent = self.sock.sendmsg(batch)
                except (BlockingIOError, InterruptedError):
                    return False
                except OSError as exc:
                    self._owner.to_loop(self._owner._lost, exc)
                    return False
                self._owner.last_activity = time.monotonic()
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
        owner = self._owner
        self.blocked += 1
        low = self.high_water // 2
        deadline = time.monotonic() + self.loop_block_limit if owner.on_loop() else None
        poll = select.poll()
        poll.register(self._fd, select.POLLOUT)
        while True:
            with self._lock:
                if owner.closed:
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
                                    self.loop_block_limit, owner.label)
                    return
            try:
                poll.poll(int(wait * 1000) + 1)
            except OSError:
                return

    def stop(self) -> None:
        """The connection is closing: the loop stops flushing (loop thread)."""
        self._loop.remove_writer(self._fd)

    def drop(self) -> None:
        """The connection closed: drop the queue and release what waits on it."""
        with self._lock:
            for item in self._pending:
                if isinstance(item, _Flushed):
                    item.event.set()
                elif isinstance(item, _shm.Lent):
                    item.close()
            self._pending.clear()
            self.queued = 0


class _Flushed:
    """A marker in the write queue: everything before it has been written."""

    __slots__ = ("event",)

    def __init__(self, event: threading.Event) -> None:
        self.event = event


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
