"""Actors for ``test_cancel`` (importable by procs)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import Any

from _borrow_actors import _gate  # per process: shared by the actors of one proc

from regency.actor import Actor, concurrent_endpoint, context, current_rank, endpoint

_LOG: list[str] = []  # per process: what the actors of one proc did, in order


async def _nap(tag: str, seconds: float) -> str:
    """Sleep, logging the start, a cancellation and the end."""
    _LOG.append(f"{tag} started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        _LOG.append(f"{tag} cancelled")
        raise
    finally:
        _LOG.append(f"{tag} ended")
    return tag


class Sleeper(Actor):
    """An async actor whose endpoints wait a long time and log what happened to them."""

    @endpoint
    async def nap(self, tag: str, seconds: float = 300.0) -> str:
        return await _nap(tag, seconds)

    @endpoint
    async def stubborn(self, tag: str) -> str:
        """Catches the cancellation and goes on: its reply is dropped."""
        _LOG.append(f"{tag} started")
        try:
            await asyncio.sleep(300)
        except asyncio.CancelledError:
            _LOG.append(f"{tag} ignored the cancel")
        return tag

    @endpoint
    async def timed(self) -> str:
        """``asyncio.wait_for`` in the actor's task: a TimeoutError, even after a handler
        of this task was cancelled."""
        try:
            await asyncio.wait_for(asyncio.sleep(10), timeout=0.01)
        except (TimeoutError, asyncio.TimeoutError):
            return "timed out"
        return "slept"

    @endpoint
    async def nap_but_rank_0(self, tag: str) -> str:
        """Rank 0 answers at once; the others nap."""
        if current_rank().rank == 0:
            return f"{tag} at once"
        return await _nap(tag, 300.0)

    @concurrent_endpoint
    async def body(self, tag: str) -> str:
        return await _nap(tag, 300.0)

    @endpoint
    async def record(self, tag: str) -> str:
        _LOG.append(tag)
        return tag

    @endpoint
    async def shared(self, tag: str) -> str:
        """Awaits one task every call shares (started by the first): cancelling the call
        that awaits it cancels the task too, as asyncio does."""
        _LOG.append(f"{tag} started")
        if getattr(self, "loading", None) is None:
            self.loading = asyncio.get_running_loop().create_task(asyncio.sleep(300))
        await self.loading
        return tag

    @endpoint
    async def raise_cancelled(self) -> None:
        raise asyncio.CancelledError("raised by the endpoint itself")

    @endpoint
    async def relay(self, peer: Any, tag: str) -> str:
        """Await ``peer.nap``: cancelling this call cancels that one (asyncio's rule for
        what a cancelled task awaits)."""
        return await peer.nap.call_one(tag)

    @endpoint
    async def cancel_peers_nap(self, peer: Any, watcher: Any, tag: str) -> str:
        """Call ``peer.nap``, cancel it once it runs (``watcher``, an ``Opener`` of its
        proc, tells), and say what the await raised."""
        fut = peer.nap.call_one(tag)
        deadline = time.monotonic() + 30
        while f"{tag} started" not in await watcher.history.call_one():
            if time.monotonic() > deadline:
                return "never started"
            await asyncio.sleep(0.01)
        if not fut.cancel():
            return "not cancelled"
        try:
            await fut
        except concurrent.futures.CancelledError:
            return "cancelled"
        return "answered"


class Blocker(Actor):
    """A sync actor whose ``block`` waits until an ``Opener`` of its proc opens a gate."""

    @endpoint
    def block(self, tag: str) -> str:
        _LOG.append(f"{tag} started")
        _gate(tag).wait(60)
        _LOG.append(f"{tag} ended")
        return tag

    @endpoint
    def record(self, tag: str) -> str:
        _LOG.append(tag)
        return tag

    @endpoint
    def until_cancelled(self, tag: str, seconds: float) -> str:
        """Work in steps for ``seconds`` at most, looking at ``context().cancelled``."""
        _LOG.append(f"{tag} started")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if context().cancelled:
                _LOG.append(f"{tag} noticed")
                return "cancelled"
            time.sleep(0.005)
        return "not cancelled"


class Opener(Actor):
    """Another actor of a proc: opens a ``Blocker``'s gate, tells the proc's log while its
    other actors are busy."""

    @endpoint
    def open(self, tag: str) -> None:
        _gate(tag).set()

    @endpoint
    def history(self) -> list[str]:
        return list(_LOG)
