"""Actor cells: a mailbox and the thread or task that drains it, one message at a time.

A *behavior* object from the API layer supplies what to run: ``handle(env, frame)`` for each
message (a coroutine for async actors) and control callables (init, stop) placed in the same
mailbox, so ``__init__`` runs before any message and ``__cleanup__`` after all earlier ones.

* Sync actors get a thread of their own, so a blocking ``.get()`` inside an endpoint is legal:
  the loop that must deliver its reply is elsewhere.
* Async actors run as one task on the proc's loop; ``await`` inside an endpoint does not let
  the next message in (``@concurrent_endpoint`` bodies are spawned as tasks by the behavior).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("regency.cell")

_STOP = object()


class Behavior(Protocol):
    """What a cell runs; implemented by the API layer."""

    def handle(self, env: tuple[Any, ...], frame: list[memoryview]) -> Any: ...


class SyncCell:
    """A sync actor: a dedicated thread drains a FIFO queue."""

    def __init__(self, uid: str, behavior: Behavior, context_setup: Callable[[], None]) -> None:
        self.uid = uid
        self.behavior = behavior
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._setup = context_setup
        self.thread = threading.Thread(target=self._run, name=f"regency-actor-{uid}", daemon=True)
        self.thread.start()

    def enqueue(self, env: tuple[Any, ...], frame: list[memoryview]) -> None:
        """Queue a message (any thread)."""
        self._queue.put((env, frame))

    def control(self, fn: Callable[[], Any]) -> None:
        """Queue ``fn()`` to run on the actor's thread after earlier messages."""
        self._queue.put((None, fn))

    def close(self) -> None:
        """Let the thread end after the queued items."""
        self._queue.put(_STOP)

    def _run(self) -> None:
        self._setup()
        get = self._queue.get
        handle = self.behavior.handle
        while True:
            item = get()
            if item is _STOP:
                return
            env, payload = item
            try:
                if env is None:
                    payload()
                else:
                    handle(env, payload)
            except BaseException:  # the behavior turns errors into failures itself
                log.exception("regency: internal error in actor %s", self.uid)
            # drop the message before waiting for the next one: its receive buffers go back
            # to the pool (a large payload is otherwise kept alive one message too long)
            del item, env, payload


class AsyncCell:
    """An async actor: one task on the loop drains an asyncio queue."""

    def __init__(
        self,
        uid: str,
        behavior: Behavior,
        loop: asyncio.AbstractEventLoop,
        context_setup: Callable[[], None],
        on_loop: Callable[[], bool],
    ) -> None:
        self.uid = uid
        self.behavior = behavior
        self.loop = loop
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._setup = context_setup
        self._on_loop = on_loop
        self.task = loop.create_task(self._run(), name=f"regency-actor-{uid}")

    def enqueue(self, env: tuple[Any, ...], frame: list[memoryview]) -> None:
        """Queue a message (loop thread)."""
        self._queue.put_nowait((env, frame))

    def control(self, fn: Callable[[], Any]) -> None:
        """Queue ``fn()`` (may return an awaitable) after earlier messages; any thread."""
        if self._on_loop():
            self._queue.put_nowait((None, fn))
        else:
            self.loop.call_soon_threadsafe(self._queue.put_nowait, (None, fn))

    def close(self) -> None:
        """Let the task end after the queued items."""
        self.loop.call_soon_threadsafe(self._queue.put_nowait, _STOP)

    async def _run(self) -> None:
        self._setup()
        get = self._queue.get
        handle = self.behavior.handle
        while True:
            item = await get()
            if item is _STOP:
                return
            env, payload = item
            result = None
            try:
                result = payload() if env is None else handle(env, payload)
                if asyncio.iscoroutine(result):
                    await result
            except asyncio.CancelledError:
                raise
            except BaseException:
                log.exception("regency: internal error in actor %s", self.uid)
            del item, env, payload, result  # see SyncCell._run
