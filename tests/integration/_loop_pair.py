"""An event loop on a thread of its own, and what the connections on it deliver (for the
transport tests, which put two real connections on one loop)."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

from regency._transport._connection import Connection

T = 10.0


class LoopPair:
    """Subclasses make their connections with ``on_frame`` and ``on_close`` as callbacks;
    ``got`` and ``closed`` collect what arrives, ``wait`` waits for it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.got: list[Any] = []
        self.closed: list[BaseException | None] = []
        self.arrived = threading.Condition()

    def call(self, fn: Any) -> Any:
        """``fn()`` on the loop thread; its result."""
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(T)

    def keep(self, frame: list[memoryview]) -> Any:
        """What ``got`` records of a frame."""
        return frame

    def on_frame(self, conn: Connection, frame: list[memoryview]) -> None:
        with self.arrived:
            self.got.append(self.keep(frame))
            self.arrived.notify_all()

    def on_close(self, conn: Connection, exc: BaseException | None) -> None:
        with self.arrived:
            self.closed.append(exc)
            self.arrived.notify_all()

    def wait(self, predicate: Any) -> None:
        with self.arrived:
            assert self.arrived.wait_for(predicate, timeout=3 * T), "nothing arrived in time"

    def connect(self, poller: Any = None) -> tuple[Connection, Connection]:
        """Two started connections over a Unix socket pair, on the loop: ``a`` (whose frames
        arrive nowhere) and ``b`` (whose frames and close arrive here; read through
        ``poller``, if given)."""
        sa, sb = socket.socketpair()
        for s in (sa, sb):
            s.setblocking(False)

        def make() -> tuple[Connection, Connection]:
            a = Connection(sa, self.loop, lambda c, f: None, lambda c, e: None, label="a")
            b = Connection(sb, self.loop, self.on_frame, self.on_close, label="b",
                           poller=poller() if callable(poller) else poller)
            a.start()
            b.start()
            return a, b

        return self.call(make)  # type: ignore[no-any-return]

    def stop(self) -> None:
        """Stop and close the loop (its connections closed first)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(T)
        self.loop.close()
