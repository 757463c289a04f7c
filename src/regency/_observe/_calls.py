"""Timing an actor's calls: a wrapper around its behavior's ``handle``, set only when recording.

With recording off the behavior's own ``handle`` runs and nothing here is on the path. With it
on, each call costs two clock reads, a dictionary increment and, while the process's budget of
recorded calls lasts, one row in the recorder's queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import Any

from ._recorder import ActorTap, Recorder

__all__ = ["timed_handle"]

Handle = Callable[[Any, list[memoryview]], Any]


def timed_handle(inner: Handle, tap: ActorTap, rec: Recorder, is_async: bool,
                 failed: Callable[[], bool]) -> Handle:
    """``inner`` (a behavior's ``handle``), counting and recording each call."""
    proc, actor, mesh = rec.proc, tap.actor, tap.mesh
    counts, recorded = tap.counts, tap.recorded
    clock = time.time_ns

    def done(call: Any, size: int, start: int) -> None:
        end = clock()
        endpoint = call.endpoint
        counts[endpoint] = counts.get(endpoint, 0) + 1
        if rec.budget > 0:
            rec.budget -= 1
            recorded[endpoint] = recorded.get(endpoint, 0) + 1
            rec.rows.append(("calls", (start // 1000, end // 1000, proc, actor, call.sender,
                                       mesh, endpoint, size, 0 if failed() else 1)))

    if is_async:
        async def timed(coro: Coroutine[Any, Any, Any], call: Any, size: int) -> None:
            start = clock()
            try:
                await coro
            finally:
                done(call, size, start)

        def handle_async(call: Any, frame: list[memoryview]) -> Any:
            return timed(inner(call, frame), call, sum([b.nbytes for b in frame]))

        return handle_async

    def handle(call: Any, frame: list[memoryview]) -> Any:
        size = sum([b.nbytes for b in frame])
        start = clock()
        try:
            return inner(call, frame)
        finally:
            done(call, size, start)

    return handle
