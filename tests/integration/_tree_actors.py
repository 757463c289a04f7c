"""Actors for the multicast tree tests (importable by procs)."""

from __future__ import annotations

import os
import time

from regency.actor import Actor, endpoint


class Recorder(Actor):
    """Records the sequence numbers it receives, in arrival order."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    @endpoint
    def note(self, i: int) -> int:
        self.seen.append(i)
        return os.getpid()

    @endpoint
    def log(self) -> list[int]:
        return self.seen

    @endpoint
    def relay_to(self, other: object, i: int) -> None:
        other.note.broadcast(i)  # type: ignore[attr-defined]

    @endpoint
    def log_of(self, other: object) -> list[int]:
        """The log of ``other`` (one member), asked by this actor: so it is read after what
        this actor sent it before (per-sender order), which the controller cannot know."""
        return other.log.call_one().get(timeout=60)  # type: ignore[attr-defined,no-any-return]


class LoopHog(Actor):
    """An async actor whose endpoint holds its proc's event loop (and so its relaying)."""

    @endpoint
    async def hog(self, seconds: float, started_dir: str) -> None:
        with open(os.path.join(started_dir, str(os.getpid())), "w"):
            pass  # tell the test the loop is held from now on
        time.sleep(seconds)  # deliberately blocking: the loop relays nothing meanwhile
