"""One authenticated, framed connection between two runtimes, on an asyncio loop.

Theory of operation
-------------------
The protocol object is a dumb shell around two sans-IO cores from ``regency._wire``: first a
handshake (mutual HMAC challenge-response over the job secret), then a frame decoder. It reads
with ``BufferedProtocol`` so that large out-of-band buffers are received straight into their
final ``bytearray``; it writes with ``writelines`` so that they are never joined. Not one payload
byte is decoded before the handshake succeeds; a handshake or protocol error closes the
connection with one log line and never reaches the runtime as an exception.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from .._wire import (
    ClientHandshake,
    FrameDecoder,
    ProtocolError,
    ServerHandshake,
    encode_frame,
)

log = logging.getLogger("regency.transport")

FrameHandler = Callable[["Connection", list[memoryview]], None]
CloseHandler = Callable[["Connection", BaseException | None], None]
_SCRATCH = 64 * 1024


class Connection(asyncio.BufferedProtocol):
    """A framed connection; ``on_frame`` gets each frame, ``on_close`` its end."""

    def __init__(
        self,
        handshake: ClientHandshake | ServerHandshake,
        on_ready: Callable[[Connection], None],
        on_frame: FrameHandler,
        on_close: CloseHandler,
    ) -> None:
        self._handshake: ClientHandshake | ServerHandshake | None = handshake
        self._on_ready = on_ready
        self._on_frame = on_frame
        self._on_close = on_close
        self._decoder = FrameDecoder()
        self._scratch = bytearray(_SCRATCH)
        self.transport: asyncio.Transport | None = None
        self.peer_identity: str | None = None
        self.ready = False
        self.closed = False
        self.error: BaseException | None = None
        self.label = "?"
        self.target: object = None  # set by the router: whom an outgoing connection is for

    # -- asyncio protocol callbacks -------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self.label = str(transport.get_extra_info("peername") or "unix peer")
        self._flush_handshake()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._handshake is not None:
            return memoryview(self._scratch)
        return self._decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self._handshake is not None:
                self._handshake_data(bytes(self._scratch[:nbytes]))
                return
            self._decoder.buffer_updated(nbytes)
            self._drain_frames()
        except ProtocolError as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._on_close(self, self.error or exc)

    # -- sending --------------------------------------------------------------------------
    def send_frame(self, buffers: Sequence[Any]) -> None:
        """Write one frame (a list of buffers) without joining them."""
        assert self.transport is not None
        self.transport.writelines(encode_frame(buffers))

    def close(self) -> None:
        """Close the connection; ``on_close`` follows."""
        if self.transport is not None and not self.closed:
            self.transport.close()

    # -- internals ------------------------------------------------------------------------
    def _handshake_data(self, data: bytes) -> None:
        hs = self._handshake
        assert hs is not None
        hs.receive_data(data)
        self._flush_handshake()

    def _flush_handshake(self) -> None:
        hs = self._handshake
        assert hs is not None and self.transport is not None
        out = hs.data_to_send()
        if out:
            self.transport.write(out)
        if hs.failed:
            err = hs.error or ProtocolError("handshake failed")
            log.warning("regency: refused connection from %s: %s", self.label, err)
            self.error = err
            self.transport.close()
            return
        if hs.done:
            self._handshake = None
            self.peer_identity = hs.peer_identity
            self.ready = True
            rest = hs.unused_data()
            self._on_ready(self)
            if rest:
                self._decoder.feed(rest)
                self._drain_frames()

    def _drain_frames(self) -> None:
        decoder = self._decoder
        on_frame = self._on_frame
        while True:
            frame = decoder.next_frame()
            if frame is None:
                return
            on_frame(self, frame)

    def _fail(self, exc: BaseException) -> None:
        log.warning("regency: closing connection to %s: %s", self.label, exc)
        self.error = exc
        if self.transport is not None:
            self.transport.abort()
