"""An event loop on a thread of its own, and what the connections on it deliver (for the
transport tests, which put two real connections on one loop)."""

from __future__ import annotations

import asyncio
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

    def stop(self) -> None:
        """Stop and close the loop (its connections closed first)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(T)
        self.loop.close()
