"""``debug_controller()``: the script's own view of its paused ranks.

Monarch's ``debug_controller()`` returns its debug actor; regency's service is not an
actor, so this is a small handle on it with the two things a script (or a test) asks:
which ranks are paused, and waiting until one is.
"""

from __future__ import annotations

import builtins
import threading
import time
from dataclasses import dataclass

from . import _service

__all__ = ["DebugController", "DebugSessionInfo", "debug_controller"]


@dataclass(frozen=True)
class DebugSessionInfo:
    """One paused rank, as ``regency debug``'s ``list`` shows it."""

    actor_name: str
    rank: int
    coords: dict[str, int]
    hostname: str
    function: str
    lineno: int
    post_mortem: bool


class DebugController:
    """The debug service of this controller."""

    def list(self) -> list[DebugSessionInfo]:
        """The paused ranks, by actor and rank."""
        service = _service.current()
        if service is None:
            return []
        out = [DebugSessionInfo(s.start.actor, s.start.rank, dict(s.start.coords),
                                s.start.host, s.function, s.line, s.start.post_mortem)
               for s in list(service.sessions.values())]
        return sorted(out, key=lambda i: (i.actor_name, i.rank))

    def wait_pending_session(self, count: int = 1, timeout: float | None = None
                             ) -> builtins.list[DebugSessionInfo]:
        """Wait until at least ``count`` ranks are paused at a prompt; returns them.

        Raises:
            TimeoutError: fewer were paused after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        wake = threading.Event()
        while True:
            ready = [i for i in self.list() if i.lineno]
            if len(ready) >= count:
                return ready
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{len(ready)} of {count} ranks paused after {timeout}s")
            wake.wait(0.05)


def debug_controller() -> DebugController:
    """This controller's debug service (see ``regency debug`` for the console)."""
    return DebugController()
