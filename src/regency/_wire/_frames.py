"""Frame encoding and incremental, zero-copy frame decoding (sans-IO).

A *frame* is an ordered list of one or more byte buffers. Buffer 0 is normally a small
message header; later buffers may be huge out-of-band payloads (array data), which are
never copied on the sending side and land directly in their final memory on the
receiving side.

Byte format (all integers big-endian)::

    offset  size      field
    0       2         magic  b"RG"
    2       1         frame format version (PROTOCOL_VERSION, currently 1)
    3       1         padding, zero
    4       4         nbufs: number of buffers, u32, 1 <= nbufs
    8       8*nbufs   length of each buffer in bytes, u64 each
    ...     sum(len)  the buffers' bytes, one after another, no padding

A length with its top bit (:data:`ATTACHMENT`) set marks an *attachment*: its bytes (at most
:data:`MAX_ATTACHMENT_BYTES`, never buffer 0) are a small descriptor of memory that travels
beside the stream, such as a shared-memory file descriptor passed over a Unix socket. The
codec only frames it; a decoder made with ``attachments=True`` hands it out wrapped in
:class:`Attachment` for the transport to resolve, and any other decoder refuses it.

The first ``8 + 8 * nbufs`` bytes are the *prefix*. :func:`encode_frame` returns the
prefix as one ``bytes`` object followed by the caller's buffers, ready for
``transport.writelines``. :class:`FrameDecoder` turns a byte stream back into frames, either
by copying (:meth:`FrameDecoder.feed`) or through the ``get_buffer``/``buffer_updated`` pair
of :class:`asyncio.BufferedProtocol`, where the bytes of a large buffer are read by the
socket straight into that buffer's own destination ``bytearray``.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Sequence
from pickle import PickleBuffer
from typing import Any, Final, TypeAlias

from ._errors import ProtocolError

__all__ = [
    "ATTACHMENT",
    "LARGE_BUFFER_BYTES",
    "MAX_ATTACHMENT_BYTES",
    "MAGIC",
    "PROTOCOL_VERSION",
    "SCRATCH_BYTES",
    "Attachment",
    "FrameDecoder",
    "Destination",
    "encode_frame",
]

MAGIC: Final = b"RG"
PROTOCOL_VERSION: Final = 1

#: Flag in a buffer's length: the buffer is an attachment descriptor.
ATTACHMENT: Final = 1 << 63
#: The largest attachment descriptor a decoder accepts.
MAX_ATTACHMENT_BYTES: Final = 64

#: A buffer at least this big is received into its own destination, not via the scratch.
LARGE_BUFFER_BYTES: Final = 64 * 1024
#: Size of the decoder's scratch area that small buffers and prefixes are read into.
SCRATCH_BYTES: Final = 256 * 1024

_PREFIX_BYTES: Final = 8
_LENGTH_BYTES: Final = 8
_PREFIX: Final = struct.Struct("!3sxI")
_PREFIX_UNPACK: Final = _PREFIX.unpack_from
_EXPECTED_MAGIC: Final = MAGIC + bytes([PROTOCOL_VERSION])
_MAX_NBUFS: Final = 0xFFFFFFFF
_CACHED_COUNTS: Final = 64

# Prefix structs for the common buffer counts, built once; others are built per use.
_ENCODERS: Final = {n: struct.Struct(f"!2sBxI{n}Q") for n in range(1, _CACHED_COUNTS + 1)}
_DECODERS: Final = {n: struct.Struct(f"!{n}Q") for n in range(1, _CACHED_COUNTS + 1)}
_PAIR: Final = _ENCODERS[2]
_PAIR_UNPACK: Final = struct.Struct("!3sxIQQ").unpack_from  # the prefix of a two-buffer frame
_PAIR_BYTES: Final = _PREFIX_BYTES + 2 * _LENGTH_BYTES

BufferLike: TypeAlias = "bytes | bytearray | memoryview"
#: What a decoder receives a large buffer into: any writable, contiguous buffer of exactly
#: the size asked for (a ``bytearray``; the transport also uses lazily committed anonymous
#: ``mmap`` s). Typed loosely: the buffer protocol has no static type before Python 3.12.
Destination: TypeAlias = Any


def _byte_view(buf: BufferLike) -> memoryview:
    """A flat unsigned-byte view of *buf*, sharing its memory whenever it is contiguous.

    Multi-dimensional or typed views (numpy data, ``PickleBuffer.raw()`` of an array) are
    cast to bytes; a non-contiguous view is the one case that is copied.
    """
    view = memoryview(buf)
    if view.format == "B" and view.ndim == 1 and view.c_contiguous:
        return view
    if view.contiguous:
        return PickleBuffer(view).raw()
    return memoryview(view.tobytes(order="A"))


class Attachment:
    """A frame buffer that is the descriptor of memory passed beside the stream."""

    __slots__ = ("descriptor",)

    def __init__(self, descriptor: memoryview) -> None:
        self.descriptor = descriptor

    def __repr__(self) -> str:
        return f"Attachment({bytes(self.descriptor)!r})"


def encode_frame(
    buffers: Sequence[BufferLike], attached: Sequence[int] = ()
) -> list[bytes | memoryview]:
    """Encode *buffers* as one frame, without copying them.

    Returns ``[prefix, buf0, buf1, ...]``: ``prefix`` is a single ``bytes`` object holding
    the magic, the buffer count and every length; ``bytes`` buffers are returned as they
    are and every other buffer as a flat byte ``memoryview`` over the caller's memory. The
    caller must not modify the buffers until they are written. The buffers whose indexes
    are in ``attached`` are marked as attachment descriptors.
    """
    nbufs = len(buffers)
    if nbufs == 2 and not attached:  # a header and a small pickle: most messages
        head, body = buffers[0], buffers[1]
        if type(head) is bytes and type(body) is bytes:
            return [_PAIR.pack(MAGIC, PROTOCOL_VERSION, 2, len(head), len(body)), head, body]
    if nbufs == 0:
        raise ValueError("a frame needs at least one buffer")
    out: list[bytes | memoryview] = [b""]
    lengths: list[int] = []
    for buf in buffers:
        if type(buf) is bytes:
            lengths.append(len(buf))
            out.append(buf)
        else:
            view = _byte_view(buf)
            lengths.append(view.nbytes)
            out.append(view)
    for i in attached:
        if i == 0 or lengths[i] > MAX_ATTACHMENT_BYTES:
            raise ValueError(f"buffer {i} cannot be an attachment (the header, or too long)")
        lengths[i] |= ATTACHMENT
    packer = _ENCODERS.get(nbufs) or struct.Struct(f"!2sBxI{nbufs}Q")
    out[0] = packer.pack(MAGIC, PROTOCOL_VERSION, nbufs, *lengths)
    return out


class FrameDecoder:
    """Incremental decoder from a byte stream to frames, with a zero-copy receive path.

    Feed bytes with :meth:`feed` (copies) or with :meth:`get_buffer` followed by
    :meth:`buffer_updated` (the :class:`asyncio.BufferedProtocol` pair), in any mix, then
    collect complete frames with :meth:`next_frame`. Every buffer of a frame is a writable
    ``memoryview`` over memory that the decoder allocated and never reuses (a ``bytearray``
    or what ``allocate`` returns for a large buffer; arrays rebuilt on it are writable); a
    frame that arrived whole in one read shares one ``bytearray`` among its buffers, which
    costs a single copy for the whole frame.

    While a buffer of at least :data:`LARGE_BUFFER_BYTES` is incomplete, :meth:`get_buffer`
    hands out the unfilled part of that buffer's final ``bytearray``, so the socket writes
    the payload in place; otherwise it hands out free space of a scratch area from which
    prefixes and small buffers are parsed (and copied out).

    Limits are checked before anything is allocated: ``max_buffers`` bounds the buffer
    count, ``max_frame_bytes`` the sum of a frame's lengths and ``max_header_bytes`` the
    length of buffer 0. Any violation, a bad magic or an unknown format version raises
    :class:`ProtocolError`, and the decoder then stays failed: ``feed``,
    ``get_buffer`` and ``buffer_updated`` raise again, and ``next_frame`` raises once the
    frames completed before the corruption have been handed out.

    With ``attachments=True``, buffers flagged as attachments come out as
    :class:`Attachment` objects in their place; otherwise a flagged length is an error.
    """

    __slots__ = (
        "_allocate",
        "_attached",
        "_attachments",
        "_dest",
        "_dest_pos",
        "_end",
        "_error",
        "_frame",
        "_frames",
        "_in_frame",
        "_index",
        "_lengths",
        "_max_buffers",
        "_max_frame_bytes",
        "_max_header_bytes",
        "_need",
        "_offered",
        "_reading_dest",
        "_scratch",
        "_scratch_view",
        "_start",
        "attached_frames",
    )

    def __init__(
        self,
        max_buffers: int = 4096,
        max_frame_bytes: int = 1 << 40,
        max_header_bytes: int = 1 << 32,
        allocate: Callable[[int], Destination] = bytearray,
        attachments: bool = False,
    ) -> None:
        if not 1 <= max_buffers <= _MAX_NBUFS:
            raise ValueError(f"max_buffers must be in 1..{_MAX_NBUFS}, not {max_buffers}")
        if max_frame_bytes < 0 or max_header_bytes < 0:
            raise ValueError("max_frame_bytes and max_header_bytes must not be negative")
        self._max_buffers = max_buffers
        self._max_frame_bytes = max_frame_bytes
        self._max_header_bytes = max_header_bytes
        self._allocate = allocate  # for large buffers: lets the caller reuse memory
        self._attachments = attachments
        self._attached: tuple[int, ...] = ()  # attachment indexes of the current frame
        #: Frames with attachments decoded and not yet handed out: while it is 0, no frame
        #: that ``next_frame`` returns holds an :class:`Attachment` (no need to look).
        self.attached_frames = 0
        self._scratch = bytearray(SCRATCH_BYTES)
        self._scratch_view = memoryview(self._scratch)
        self._start = 0  # first unparsed byte in the scratch
        self._end = 0  # end of the received bytes in the scratch
        self._need = _PREFIX_BYTES  # bytes from _start the parser needs to progress
        self._in_frame = False  # prefix parsed, buffers still arriving
        self._lengths: tuple[int, ...] = ()
        self._index = 0  # buffer of the current frame being received
        self._frame: list[memoryview] = []
        self._dest: memoryview | None = None  # large buffer being received in place
        self._dest_pos = 0
        self._reading_dest = False  # the last get_buffer handed out _dest
        self._offered = 0  # size of the view the last get_buffer handed out
        self._frames: deque[list[memoryview]] = deque()
        self._error: ProtocolError | None = None

    # -- input -------------------------------------------------------------------------

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append *data* to the stream (copied) and decode every frame it completes."""
        view = _byte_view(data)
        total = len(view)
        pos = 0
        while pos < total:
            target = self.get_buffer(total - pos)
            count = min(len(target), total - pos)
            target[:count] = view[pos : pos + count]
            self.buffer_updated(count)
            pos += count

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Return a non-empty writable view for the next bytes of the stream.

        Write up to ``len(view)`` received bytes into it, then call
        :meth:`buffer_updated`. *sizehint* is accepted for the asyncio signature and
        ignored.
        """
        if self._error is not None:
            raise self._failed()
        dest = self._dest
        if dest is not None:
            self._reading_dest = True
            view = dest[self._dest_pos :]
        else:
            self._reading_dest = False
            if self._start == self._end:
                self._start = self._end = 0
            elif (
                self._end + LARGE_BUFFER_BYTES > len(self._scratch)
                or self._start + self._need > len(self._scratch)
            ):
                self._compact()
            view = self._scratch_view[self._end :]
        self._offered = len(view)
        return view

    def buffer_updated(self, nbytes: int) -> None:
        """Record that *nbytes* bytes were written into the last :meth:`get_buffer` view."""
        if self._error is not None:
            raise self._failed()
        if not 0 <= nbytes <= self._offered:
            raise ValueError(
                f"buffer_updated({nbytes}) does not match the {self._offered}-byte view "
                "that get_buffer handed out"
            )
        self._offered = 0
        try:
            if self._reading_dest:
                self._reading_dest = False
                self._dest_pos += nbytes
                dest = self._dest
                assert dest is not None
                if self._dest_pos < len(dest):
                    return
                self._frame.append(dest)
                self._dest = None
                self._index += 1
            else:
                self._end += nbytes
            self._parse()
        except ProtocolError as exc:
            self._error = exc
            raise

    # -- output ------------------------------------------------------------------------

    def next_frame(self) -> list[memoryview] | None:
        """Return the oldest complete frame, or ``None`` when more bytes are needed."""
        if self._frames:
            return self._frames.popleft()
        if self._error is not None:
            raise self._failed()
        return None

    @property
    def at_frame_boundary(self) -> bool:
        """True when no partial frame is buffered (an EOF now would lose nothing)."""
        return not self._in_frame and self._start == self._end

    # -- internals ---------------------------------------------------------------------

    def _failed(self) -> ProtocolError:
        return ProtocolError(f"the frame stream already failed: {self._error}")

    def _compact(self) -> None:
        """Move the unparsed bytes to the front of the scratch, growing it if needed."""
        start, end = self._start, self._end
        pending = end - start
        capacity = max(len(self._scratch), self._need + LARGE_BUFFER_BYTES)
        if capacity > len(self._scratch):
            fresh = bytearray(capacity)
            fresh[:pending] = self._scratch_view[start:end]
            self._scratch = fresh
            self._scratch_view = memoryview(fresh)
        else:
            self._scratch_view[:pending] = self._scratch_view[start:end]
        self._start = 0
        self._end = pending

    def _parse(self) -> None:
        """Decode as much of the scratch as possible; complete frames go to the queue.

        The common case, a whole frame already in the scratch, is decoded in one go with a
        single copy of its body; a frame that is still arriving is finished by
        :meth:`_resume`.
        """
        buf = self._scratch
        start = self._start
        end = self._end
        append = self._frames.append
        max_buffers = self._max_buffers
        if self._in_frame:
            start = self._resume(start, end)
            if start < 0:
                return
        while True:
            if end - start >= _PAIR_BYTES:  # a header and a small pickle, whole: most frames
                magic, nbufs, head, rest = _PAIR_UNPACK(buf, start)
                body = start + _PAIR_BYTES
                stop = body + head + rest
                if (nbufs == 2 and stop <= end and magic == _EXPECTED_MAGIC and max_buffers > 1
                        and head <= self._max_header_bytes
                        and head + rest <= self._max_frame_bytes):  # no attachment flags
                    view = memoryview(buf[body:stop])
                    append([view[:head], view[head:]])
                    start = stop
                    continue
            if end - start < _PREFIX_BYTES:
                self._need = _PREFIX_BYTES
                break
            magic, nbufs = _PREFIX_UNPACK(buf, start)
            if magic != _EXPECTED_MAGIC or not 0 < nbufs <= max_buffers:
                raise self._bad_prefix(magic, nbufs)
            body = start + _PREFIX_BYTES + _LENGTH_BYTES * nbufs
            if body > end:
                self._need = body - start
                break
            unpacker = _DECODERS.get(nbufs) or struct.Struct(f"!{nbufs}Q")
            lengths = unpacker.unpack_from(buf, start + _PREFIX_BYTES)
            total = sum(lengths)
            attached: tuple[int, ...] = ()
            if total > self._max_frame_bytes or lengths[0] > self._max_header_bytes:
                lengths, attached = self._split_attachments(lengths, total)
            if body + total <= end and not attached:
                view = memoryview(buf[body : body + total])
                if nbufs == 1:
                    append([view])
                else:
                    frame = []
                    pos = 0
                    for size in lengths:
                        frame.append(view[pos : pos + size])
                        pos += size
                    append(frame)
                start = body + total
                continue
            self._lengths = lengths
            self._attached = attached
            self._index = 0
            self._frame = []
            self._in_frame = True
            start = self._resume(body, end)
            if start < 0:
                return
        self._start = start

    def _resume(self, start: int, end: int) -> int:
        """Receive more buffers of the current frame from the scratch.

        Returns where the parsed bytes end once the frame is complete (and queued), or -1
        when it still needs bytes (its state and ``_start`` are then saved).
        """
        lengths = self._lengths
        frame = self._frame
        nbufs = len(lengths)
        i = self._index
        while i < nbufs:
            size = lengths[i]
            if end - start >= size:
                frame.append(memoryview(self._scratch[start : start + size]))
                start += size
            elif size >= LARGE_BUFFER_BYTES:
                self._start_large(size, start, end)
                self._index = i
                self._start = self._end = 0
                return -1
            else:
                self._index = i
                self._need = size
                self._start = start
                return -1
            i += 1
        if self._attached:
            for j in self._attached:
                frame[j] = Attachment(frame[j])  # type: ignore[call-overload]
            self._attached = ()
            self.attached_frames += 1
        self._frames.append(frame)
        self._in_frame = False
        return start

    def _start_large(self, size: int, start: int, end: int) -> None:
        """Allocate the destination of a large buffer and move its first bytes there."""
        try:
            dest = memoryview(self._allocate(size))
        except MemoryError:
            raise ProtocolError(
                f"cannot allocate a {size}-byte frame buffer (out of memory)"
            ) from None
        have = end - start
        dest[:have] = self._scratch_view[start:end]
        self._dest = dest
        self._dest_pos = have

    def _split_attachments(
        self, lengths: tuple[int, ...], total: int
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The real lengths of a frame over the limits, if attachments explain why.

        Raises the limit's :class:`ProtocolError` otherwise.
        """
        attached = tuple(i for i, n in enumerate(lengths) if n & ATTACHMENT)
        if not attached or not self._attachments:
            raise self._bad_lengths(lengths, total)
        plain = tuple(n & ~ATTACHMENT for n in lengths)
        if attached[0] == 0 or any(plain[i] > MAX_ATTACHMENT_BYTES for i in attached):
            raise ProtocolError("frame declares a malformed attachment (the header, or "
                                f"over {MAX_ATTACHMENT_BYTES} bytes)")
        total = sum(plain)
        if total > self._max_frame_bytes or plain[0] > self._max_header_bytes:
            raise self._bad_lengths(plain, total)
        return plain, attached

    def _bad_lengths(self, lengths: tuple[int, ...], total: int) -> ProtocolError:
        """Describe which limit a frame's declared sizes break."""
        if total > self._max_frame_bytes:
            return ProtocolError(
                f"frame declares {total} bytes, over the limit of {self._max_frame_bytes}"
            )
        return ProtocolError(
            f"frame header buffer declares {lengths[0]} bytes, over the limit of "
            f"{self._max_header_bytes}"
        )

    def _bad_prefix(self, magic: bytes, nbufs: int) -> ProtocolError:
        """Describe what is wrong with a frame prefix."""
        if magic[:2] != MAGIC:
            return ProtocolError(
                f"bad frame magic {magic[:2]!r} (expected {MAGIC!r}): the stream is corrupt "
                "or not regency"
            )
        if magic[2] != PROTOCOL_VERSION:
            return ProtocolError(
                f"unsupported frame format version {magic[2]} (this side speaks "
                f"{PROTOCOL_VERSION})"
            )
        if nbufs == 0:
            return ProtocolError("frame declares no buffers")
        return ProtocolError(
            f"frame declares {nbufs} buffers, over the limit of {self._max_buffers}"
        )
