"""Framing and the read loop of one connection: bytes in, whole frames out.

Reads go straight into the frame decoder's buffers (``recv_into``), so large out-of-band
buffers land in their final ``bytearray`` with no extra copy. Over a Unix socket the reader
also collects the file descriptors that travel with the stream (``SCM_RIGHTS``) for
:class:`~regency._transport._shm.Lending`, answers control frames (an empty header: shared
memory given back) and replaces a frame's attachments by the memory they name.

Who reads, and when, is not decided here: the loop (``Connection``) and a borrowing thread
(:mod:`._borrowing`) both call :meth:`Reader.read` under the connection's read lock, each
with its own sink. A read never raises for the connection's sake: how it ended comes back as
an :data:`End`, for the loop to act on.
"""

from __future__ import annotations

import array
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from .. import config
from .._wire import Attachment, Destination, FrameDecoder, ProtocolError
from . import _shm
from ._buffers import allocate_buffer
from ._tls import TlsSession

__all__ = ["End", "Reader", "Sink"]

#: How a connection ended, seen by a read: ``(failed, exc)``. ``failed``: a protocol error
#: (logged, closes the connection); otherwise a lost socket (``exc`` None: end of stream).
End = tuple[bool, BaseException | None]
Sink = Callable[[Any], None]  # gets what ``decode`` made of a frame (the frame without one)
Decode = Callable[[list[memoryview]], Any]

READS_PER_EVENT: Final = 16
SMALL: Final = 64 * 1024  # a read shorter than this drained the socket
_ANC_SPACE: Final = socket.CMSG_SPACE(253 * 4)  # room for the most descriptors one message carries
_RECV_FLAGS: Final = getattr(socket, "MSG_CMSG_CLOEXEC", 0)


class Owner(Protocol):
    """What the reader needs of its connection."""

    closed: bool
    throttled: bool
    last_activity: float


class Reader:
    """Turns the bytes of one socket into whole frames (read lock held by the caller)."""

    __slots__ = ("_decode", "_lending", "_owner", "_recv_into", "decoder", "empty", "sock")

    def __init__(self, sock: socket.socket, owner: Owner,
                 allocate: Callable[[int], Destination] = allocate_buffer,
                 lending: _shm.Lending | None = None, decode: Decode | None = None) -> None:
        """``lending`` is given for a Unix connection (no TLS): the only kind whose frames
        may carry attachments and control frames, and whose stream carries descriptors.
        ``decode`` turns a whole frame into what sinks get (its header decoded once, here,
        for every consumer; ADR 0011); it raises ``ProtocolError`` for a malformed one."""
        self.sock = sock
        self._decode = decode
        self._owner = owner
        self._lending = lending
        self.decoder = FrameDecoder(allocate=allocate, attachments=lending is not None,
                                    max_frame_bytes=int(config.get("codec_max_frame_length")))
        self._recv_into = self._recv_unix if lending is not None else sock.recv_into
        self.empty = False  # the last ``read`` found nothing to read at once

    def read(self, sink: Sink, reads: int = READS_PER_EVENT) -> End | None:
        """Read what is there (at most ``reads`` reads) and pass each whole frame to ``sink``.

        Returns how the connection ended, if it did; ``empty`` says whether it found nothing
        to read at once.
        """
        decoder = self.decoder
        recv_into = self._recv_into
        owner = self._owner
        self.empty = False
        for i in range(reads):
            try:
                view = decoder.get_buffer(-1)
                n = recv_into(view)
            except (BlockingIOError, InterruptedError):
                self.empty = i == 0
                break
            except ProtocolError as exc:
                return (True, exc)
            except OSError as exc:
                return (False, exc)
            if n == 0:
                return (False, None)
            owner.last_activity = time.monotonic()
            try:
                decoder.buffer_updated(n)
            except ProtocolError as exc:
                return (True, exc)
            end = self.drain(sink)
            if end is not None:
                return end
            if owner.closed or owner.throttled or (n < len(view) and n < SMALL):
                break  # a short read drained the socket: skip the extra recv and its EAGAIN
        return None

    def feed(self, data: bytes | memoryview, sink: Sink) -> End | None:
        """Decode bytes read some other way (the handshake's leftover, TLS plaintext)."""
        try:
            self.decoder.feed(data)
        except ProtocolError as exc:
            return (True, exc)
        return self.drain(sink)

    def read_tls(self, tls: TlsSession, sink: Sink) -> End | None:
        """Read what is there of a TLS connection, decrypt it and pass on whole frames."""
        try:
            data = self.sock.recv(1 << 18)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            return (False, exc)
        if not data:
            return (False, None)
        try:
            plain = tls.decrypt(data)
        except ssl.SSLError as exc:
            return (True, exc)
        return self.feed(plain, sink) if plain else None

    def drain(self, sink: Sink) -> End | None:
        """Pass the whole frames decoded so far to ``sink`` (control frames answered here)."""
        next_frame = self.decoder.next_frame
        lending = self._lending
        owner = self._owner
        decode = self._decode
        while not owner.closed:
            frame = next_frame()
            if frame is None:
                return None
            if lending is not None:
                if not frame[0]:
                    if not lending.control(frame):
                        return (True, ProtocolError("malformed connection control frame"))
                    continue
                if self.decoder.attached_frames and any(type(b) is Attachment for b in frame):
                    self.decoder.attached_frames -= 1
                    try:
                        frame = lending.resolve(frame)
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

    def _recv_unix(self, view: memoryview) -> int:
        n, ancillary, flags, _ = self.sock.recvmsg_into([view], _ANC_SPACE, _RECV_FLAGS)
        if ancillary:
            assert self._lending is not None
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
                    self._lending.received(fds)
            if flags & socket.MSG_CTRUNC:
                raise ProtocolError("file descriptors sent with a frame were cut off")
        return n
