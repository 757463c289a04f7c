"""Actors for the multicast tree tests (importable by procs)."""

from __future__ import annotations

import os

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
