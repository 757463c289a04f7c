"""Opening connections on a thread of their own, so that a flooded event loop cannot hold
them up.

Theory of operation
-------------------
A connection is opened by a connect and a handshake of a few round trips
(:func:`regency._transport.connect`). Run on the runtime's event loop, each round trip
waits for one of the loop's turns, and on a loop that is handling a flood of messages on a
busy machine a turn can take tens of milliseconds: a stage of a pipeline, fed flat out by a
producer, took 0.05 to 1.3 s to open its connection to the next stage with four CPU-bound
processes beside it, and the frames queued for that connection waited all along (the same
pipeline with the connection already open: 7 to 80 ms to its first 100 messages).

:class:`Connector` runs ``connect`` on a private event loop in a thread of its own, which
has nothing else to do: a handshake then waits only for its peer and for the interpreter
lock (which a busy thread hands over within a switch interval). The runtime's loop only
starts the attempt and, once the socket is ready, attaches it. The thread lives while
attempts are in flight and ends when the last one has (a process that opens no
connection has none, and a process forked later starts its own).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["Connector"]

T = TypeVar("T")

_THREAD_NAME = "regency-connector"


class Connector:
    """Runs coroutines that open connections on a private loop in a daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        self._in_flight = 0
        self.thread: threading.Thread | None = None  # the current thread, if any (tests)

    async def run(self, attempt: Coroutine[Any, Any, T]) -> T:
        """Await ``attempt`` run on the connector's thread (from the runtime's loop).

        Cancelling the caller cancels the attempt; a socket it opened anyway is closed."""
        loop = self._enter()
        future = asyncio.run_coroutine_threadsafe(attempt, loop)
        future.add_done_callback(lambda _: self._leave(loop))
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.add_done_callback(_close_unused)
            raise

    def _enter(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                self._loop = asyncio.SelectorEventLoop()
                self._pid = os.getpid()
                self._in_flight = 0
                self.thread = threading.Thread(target=_serve, args=(self._loop,),
                                               name=_THREAD_NAME, daemon=True)
                self.thread.start()
            self._in_flight += 1
            return self._loop

    def _leave(self, loop: asyncio.AbstractEventLoop) -> None:
        """An attempt on ``loop`` ended (the connector's thread): the last one stops it."""
        with self._lock:
            if loop is not self._loop:
                return  # closed meanwhile: already stopping
            self._in_flight -= 1
            if self._in_flight:
                return
            self._loop = None
        loop.call_soon_threadsafe(loop.stop)

    def close(self) -> None:
        """Stop the thread now, whatever is in flight (their callers are cancelled by the
        runtime as it closes)."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None and self._pid == os.getpid():
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:
                pass  # it stopped and closed meanwhile


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The connector thread: run the loop until stopped, then cancel what is left."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()


def _close_unused(future: concurrent.futures.Future[Any]) -> None:
    """An attempt whose caller was cancelled: close the socket it opened, if it did."""
    if future.cancelled() or future.exception() is not None:
        return
    result = future.result()
    sock = result[0] if isinstance(result, tuple) and result else None
    if isinstance(sock, socket.socket):
        sock.close()
