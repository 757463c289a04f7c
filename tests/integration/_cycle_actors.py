"""Actors that call each other, for tests/integration/test_call_cycles.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from regency.actor import Actor, concurrent_endpoint, endpoint


class Hopper(Actor):
    """``hop(n, via)`` calls its peer's endpoint ``via`` with ``n - 1`` and waits for it;
    ``hop(0)`` answers."""

    def __init__(self) -> None:
        self.peer: Any = None

    @endpoint
    def set_peer(self, peer: Any) -> None:
        self.peer = peer

    @endpoint
    def hop(self, n: int, via: str = "hop") -> str:
        if n == 0:
            return "done"
        return getattr(self.peer, via).call_one(n - 1, via=via).get()

    @endpoint
    def hop_t(self, n: int, via: str = "hop_t") -> str:
        """``hop`` with a timeout on its wait: a cycle through it ends by itself."""
        if n == 0:
            return "done"
        return getattr(self.peer, via).call_one(n - 1, via=via).get(timeout=2)

    @endpoint
    def hop_all(self, n: int) -> list[str]:
        """Waits on every member of its peer mesh."""
        return list(self.peer.hop.call(n - 1).get().values())

    @endpoint
    def slow(self, n: int, via: str = "", seconds: float = 1.0) -> str:
        time.sleep(seconds)
        return "slow"

    @endpoint
    def echo(self) -> str:
        return "echo"


class AsyncHopper(Actor):
    """``Hopper`` with async endpoints; ``hop_c`` is a concurrent one."""

    def __init__(self) -> None:
        self.peer: Any = None
        self.nap = 0.0  # how long hop_c(0) takes

    @endpoint
    async def set_peer(self, peer: Any, nap: float = 0.0) -> None:
        self.peer = peer
        self.nap = nap

    @endpoint
    async def hop(self, n: int, via: str = "hop") -> str:
        if n == 0:
            return "done"
        return await getattr(self.peer, via).call_one(n - 1, via=via)

    @concurrent_endpoint
    async def hop_c(self, n: int, via: str = "hop") -> str:
        if n == 0:
            await asyncio.sleep(self.nap)
            return "done"
        return await getattr(self.peer, via).call_one(n - 1, via=via)

    @endpoint
    async def hop_all(self, n: int) -> list[str]:
        return list((await self.peer.hop.call(n - 1)).values())

    @endpoint
    async def step(self, seconds: float) -> str:
        """Starts a task that waits on its peer (which calls back), then sleeps: the task's
        wait is not the endpoint's."""
        self.background = asyncio.create_task(self._notify())
        await asyncio.sleep(seconds)
        return "stepped"

    async def _notify(self) -> str:
        return await self.peer.hop.call_one(1)

    @endpoint
    async def background_result(self) -> str:
        return await self.background

    @endpoint
    async def echo(self) -> str:
        return "echo"
