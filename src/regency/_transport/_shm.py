"""Large frame buffers through shared memory, between processes of one host.

Theory of operation
-------------------
Over a Unix socket, a frame's large buffers need not travel through the socket: the sender
copies them once into a shared-memory *segment* (a ``memfd``) and passes its file descriptor
beside the frame (``SCM_RIGHTS``). In the stream each such buffer is replaced by a small
*descriptor* -- which of the frame's segments, the segment's token, offset, length -- marked
as an attachment in the frame prefix (:mod:`regency._wire`).

The receiver maps each segment copy-on-write (``MAP_PRIVATE``) and hands out views of it, so
it copies nothing: arrays rebuilt on the views are writable, a write lands in a private copy
of that page only, and a buffer nobody touches costs nothing.

Fresh shared memory is expensive (the kernel allocates and zero-fills every page, and frees
them again), so the sender keeps a :class:`SegmentPool`: a segment is *lent* with a frame and
comes back when the receiver's mapping dies -- its finaliser sends a release for the token
(:meth:`Incoming.map`). Until then the sender never writes to it, so a receiver's untouched
pages never change under it. A segment lent over a connection that closes is dropped, never
reused: its reader may still hold it. Segments are sealed against shrinking, so a receiver
can never fault on a truncated file. Free segments unused for a while are dropped
(:meth:`SegmentPool.trim`, run by the router every few seconds). A buffer larger than the
pool's capacity gets a one-off segment, sealed against writes too, with token 0 (nothing to
give back).

:class:`Lending` is one connection's share of all this, both ways: it lends a frame's large
buffers (:meth:`Lending.share`), queues the descriptors that arrive (in arrival order; a
frame with attachments takes its segments from the front, which is correct because a
descriptor arrives no later than the first byte it was sent with), maps what a received
frame names (:meth:`Lending.resolve`) and keeps the books of segments given back, which
travel as *control frames*: an empty header, then the tokens (:func:`release_frame`).
"""

from __future__ import annotations

import array
import collections
import fcntl
import logging
import mmap
import os
import socket
import struct
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pickle import PickleBuffer
from typing import Any

from .._wire import Attachment
from ._memaddr import address_of, copy

__all__ = ["DESCRIPTOR", "Lending", "Lent", "SegmentPool", "ShmError", "ancillary",
           "map_segment", "release_frame", "resolve"]

log = logging.getLogger("regency.transport")

#: One attachment in the stream: segment index in the frame, token, offset, length.
DESCRIPTOR = struct.Struct("!IQQQ")
#: The most segments one frame may bring (the kernel's limit on descriptors per message).
MAX_SEGMENTS = 253
_ALIGN = mmap.PAGESIZE
_GRAIN = 1 << 20  # pooled segment sizes are rounded up to this
_SIZE_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
_MAX_WRITE = 0x7FFFF000  # Linux moves at most this much per write call


class ShmError(Exception):
    """A shared-memory attachment that cannot be used (bad descriptor, unsealed segment)."""


@dataclass(eq=False)
class _Segment:
    """A pooled segment. Its descriptor closes and its mapping goes only when the last
    reference does: a frame still being written or queued keeps both valid."""

    token: int
    fd: int
    size: int
    mapping: mmap.mmap
    address: int
    lent: object = None  # the connection it is lent over, or None when free
    freed_at: float = 0.0  # when it last came back (monotonic)

    def __post_init__(self) -> None:
        weakref.finalize(self, os.close, self.fd).atexit = False


@dataclass
class Lent:
    """What a frame sends: one segment's descriptor and the attachments into it."""

    fd: int
    descriptors: list[bytes]
    owned: bool  # a one-off segment: close ``fd`` once it is sent
    token: int = 0
    segment: _Segment | None = None  # a pooled one, kept alive until sent
    attached: list[int] = field(default_factory=list)  # frame indexes of the descriptors
    queued: bool = False  # the write queue owns it now

    def close(self) -> None:
        """Done sending: give up the one-off descriptor or the pooled segment (idempotent)."""
        if self.owned and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.segment = None


@dataclass
class SegmentPool:
    """Reusable shared-memory segments of one process, lent one frame at a time."""

    capacity: int = 1 << 30
    _segments: dict[int, _Segment] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next_token: int = 1
    _bytes: int = 0

    def lend(self, views: Sequence[memoryview], borrower: object) -> Lent:
        """Copy ``views`` into a segment lent to ``borrower`` (a connection).

        Raises ``OSError`` when no shared memory can be had; the caller then sends the
        buffers through the stream.
        """
        offsets, total = _layout(views)
        segment = self._acquire(total, borrower)
        if segment is None:
            return _one_off(views, offsets, total)
        try:
            for view, offset in zip(views, offsets):
                copy(segment.address + offset, view)
        except BaseException:
            self.release([segment.token], borrower)
            raise
        return Lent(segment.fd, _descriptors(segment.token, views, offsets), owned=False,
                    token=segment.token, segment=segment)

    def _acquire(self, total: int, borrower: object) -> _Segment | None:
        size = -(-total // _GRAIN) * _GRAIN
        if size > self.capacity:
            return None
        with self._lock:
            best = None
            for segment in self._segments.values():
                if segment.lent is None and size <= segment.size <= 2 * size and (
                        best is None or segment.size < best.size):
                    best = segment
            if best is None:
                self._evict(size)
                if self._bytes + size > self.capacity:
                    return None
                best = self._create(size)
            best.lent = borrower
            return best

    def _create(self, size: int) -> _Segment:
        fd = os.memfd_create("regency-pool", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SIZE_SEALS)
            mapping = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        except BaseException:
            os.close(fd)
            raise
        token = self._next_token
        self._next_token += 1
        address = address_of(memoryview(mapping))
        segment = _Segment(token, fd, size, mapping, address)
        self._segments[token] = segment
        self._bytes += size
        return segment

    def _evict(self, size: int) -> None:
        """Drop free segments, oldest first, until ``size`` more bytes fit (lock held)."""
        for token in list(self._segments):
            if self._bytes + size <= self.capacity:
                return
            if self._segments[token].lent is None:
                self._drop(token)

    def _drop(self, token: int) -> None:
        """Out of the pool; its memory goes with the last reference (lock held)."""
        segment = self._segments.pop(token)
        self._bytes -= segment.size

    def release(self, tokens: Sequence[int], borrower: object) -> None:
        """The borrower's mappings of these segments are gone: they are free again."""
        with self._lock:
            for token in tokens:
                segment = self._segments.get(token)
                if segment is not None and segment.lent is borrower:
                    segment.lent = None
                    segment.freed_at = time.monotonic()
                    self._segments[token] = self._segments.pop(token)  # most recent last

    def forget(self, borrower: object) -> None:
        """The borrower is gone without giving its segments back: never reuse them."""
        with self._lock:
            for token in [t for t, s in self._segments.items() if s.lent is borrower]:
                self._drop(token)

    def trim(self, idle: float) -> int:
        """Drop free segments unused for ``idle`` seconds; returns the bytes given back."""
        cutoff = time.monotonic() - idle
        with self._lock:
            before = self._bytes
            for token in [t for t, s in self._segments.items()
                          if s.lent is None and s.freed_at <= cutoff]:
                self._drop(token)
            return before - self._bytes

    def held_bytes(self) -> int:
        """Bytes of shared memory the pool holds (lent or free)."""
        return self._bytes


def _layout(views: Sequence[memoryview]) -> tuple[list[int], int]:
    offsets = []
    total = 0
    for view in views:
        offsets.append(total)
        total += -(-view.nbytes // _ALIGN) * _ALIGN
    return offsets, total


def _descriptors(token: int, views: Sequence[memoryview], offsets: list[int]) -> list[bytes]:
    return [DESCRIPTOR.pack(0, token, off, v.nbytes) for v, off in zip(views, offsets)]


def _one_off(views: Sequence[memoryview], offsets: list[int], total: int) -> Lent:
    """A fresh segment for buffers too large for the pool, sealed once written."""
    fd = os.memfd_create("regency-frame", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, total)
        for view, offset in zip(views, offsets):
            done = 0
            while done < view.nbytes:
                done += os.pwrite(fd, view[done : done + _MAX_WRITE], offset + done)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SIZE_SEALS | fcntl.F_SEAL_WRITE)
    except BaseException:
        os.close(fd)
        raise
    return Lent(fd, _descriptors(0, views, offsets), owned=True)


def map_segment(fd: int) -> mmap.mmap:
    """Map a received segment copy-on-write, after checking it cannot shrink.

    Takes ownership of ``fd`` (closed here; the mapping keeps its own reference).
    """
    try:
        if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK == 0:
            raise ShmError("a shared-memory segment arrived that could shrink: refusing it")
        size = os.fstat(fd).st_size
        if size == 0:
            raise ShmError("a shared-memory segment arrived empty")
        return mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE,
                         prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as exc:
        raise ShmError(f"cannot map a shared-memory segment: {exc}") from exc
    finally:
        os.close(fd)


def resolve(descriptors: Sequence[memoryview], take_fd: Callable[[], int | None],
            on_release: Callable[[int], None]) -> list[memoryview]:
    """Views of the memory a frame's attachment descriptors name, in their order.

    ``take_fd`` gives the frame's next received descriptor (None when none arrived);
    ``on_release(token)`` runs when the mapping of a pooled segment dies.
    """
    fields = [_parse(d) for d in descriptors]
    count = 1 + max(f[0] for f in fields)
    segments: list[mmap.mmap] = []
    for _ in range(count):
        fd = take_fd()
        if fd is None:
            raise ShmError(f"a frame names {count} shared-memory segments; fewer arrived")
        segments.append(map_segment(fd))
    tokens = {f[0]: f[1] for f in fields}
    for index, token in tokens.items():
        if token:
            _finalize(segments[index], on_release, token)
    views = []
    for index, _token, offset, length in fields:
        segment = segments[index]
        if offset + length > len(segment):
            raise ShmError(f"an attachment [{offset}, {offset + length}) lies outside its "
                           f"{len(segment)}-byte segment")
        views.append(memoryview(segment)[offset : offset + length])
    return views


def _parse(descriptor: memoryview) -> tuple[int, int, int, int]:
    if descriptor.nbytes != DESCRIPTOR.size:
        raise ShmError(f"an attachment descriptor is {descriptor.nbytes} bytes, "
                       f"expected {DESCRIPTOR.size}")
    index, token, offset, length = DESCRIPTOR.unpack(descriptor)
    if index >= MAX_SEGMENTS:
        raise ShmError(f"an attachment names segment {index}; a frame brings at most "
                       f"{MAX_SEGMENTS}")
    return index, token, offset, length


def _finalize(segment: mmap.mmap, on_release: Callable[[int], None], token: int) -> None:
    weakref.finalize(segment, on_release, token).atexit = False


def ancillary(lent: Lent) -> list[tuple[int, int, bytes]]:
    """The ``sendmsg`` ancillary data that passes ``lent``'s segment descriptor."""
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [lent.fd]).tobytes())]


def release_frame(tokens: Sequence[int]) -> list[bytes]:
    """The control frame that gives the peer's segments ``tokens`` back."""
    return [b"", struct.pack(f"!{len(tokens)}Q", *tokens)]


class Lending:
    """Shared-memory lending over one Unix connection, both ways (a part of ``Connection``).

    The pool lends segments to this object, and forgets them with it (:meth:`close`).
    ``notify()`` runs (any thread) when a segment the peer lent us may be given back; the
    owner then sends :meth:`take_releases` in a control frame.
    """

    __slots__ = ("__weakref__", "_fdq", "_hook", "_notify", "_releases", "label", "min_bytes",
                 "pool")

    def __init__(self, pool: SegmentPool | None, min_bytes: int, label: str,
                 notify: Callable[[], None]) -> None:
        self.pool = pool
        self.min_bytes = min_bytes if pool is not None else 0  # 0: never lend
        self.label = label
        self._notify = notify
        self._releases: list[int] = []
        self._fdq: collections.deque[int] = collections.deque()  # received, not yet used
        self._hook = _release_hook(weakref.ref(self))

    # -- sending ---------------------------------------------------------------------------
    def share(self, buffers: Sequence[Any]) -> tuple[Sequence[Any], Lent | None]:
        """Move the frame's large buffers into one lent segment, if it has any.

        Returns the frame with descriptors in their place, and what was lent (None: the
        frame is unchanged). Without shared memory it logs once and never lends again.
        """
        big = []
        views = []
        limit = self.min_bytes
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
        assert self.pool is not None
        try:
            lent = self.pool.lend(views, self)
        except OSError as exc:
            log.warning("regency: shared memory unavailable (%s); sending through the "
                        "socket to %s from now on", exc, self.label)
            self.min_bytes = 0
            return buffers, None
        out = list(buffers)
        for i, descriptor in zip(big, lent.descriptors):
            out[i] = descriptor
        lent.attached = big
        return out, lent

    def unlend(self, lent: Lent, closed: bool) -> None:
        """A lent segment that never reached the peer goes back (or, one-off, away);
        ``closed``: the connection died under the send, so nothing reuses it."""
        lent.close()
        if lent.token and self.pool is not None:
            if closed:
                self.pool.forget(self)
            else:
                self.pool.release([lent.token], self)

    # -- receiving -------------------------------------------------------------------------
    def received(self, fds: Sequence[int]) -> None:
        """Descriptors that arrived with the stream, in arrival order (read lock held)."""
        self._fdq.extend(fds)

    def resolve(self, frame: list[Any]) -> list[memoryview]:
        """Replace a frame's attachments by views of the shared memory they name.

        Raises :class:`ShmError` when they cannot be mapped.
        """
        fdq = self._fdq
        views = iter(resolve([b.descriptor for b in frame if type(b) is Attachment],
                             lambda: fdq.popleft() if fdq else None, self._hook))
        return [next(views) if type(b) is Attachment else b for b in frame]

    def control(self, frame: list[memoryview]) -> bool:
        """A control frame (empty header): the peer gave segments back. False: malformed."""
        if len(frame) != 2 or frame[1].nbytes % 8:
            return False
        tokens = struct.unpack(f"!{frame[1].nbytes // 8}Q", frame[1])
        if self.pool is not None:
            self.pool.release(tokens, self)
        return True

    def released(self, token: int) -> None:
        """A mapping of a segment the peer lent us died (any thread): give it back."""
        self._releases.append(token)
        self._notify()

    def take_releases(self) -> list[int]:
        """The tokens to give back now (loop thread)."""
        tokens, self._releases = self._releases, []
        return tokens

    def close(self) -> None:
        """The connection is gone: close unused descriptors, never reuse what was lent
        (the peer may still map it)."""
        while self._fdq:
            os.close(self._fdq.popleft())
        if self.pool is not None:
            self.pool.forget(self)


def _release_hook(ref: weakref.ref[Lending]) -> Callable[[int], None]:
    """What a received segment's finaliser calls; it does not keep the lending alive."""

    def release(token: int) -> None:
        lending = ref()
        if lending is not None:
            lending.released(token)

    return release
