"""Actors for ``test_borrowed_reads`` (importable by procs)."""

from __future__ import annotations

import threading
from typing import Any

from regency._api._bootstrap import runtime
from regency.actor import Actor, endpoint

_GATES: dict[str, threading.Event] = {}  # per process: shared by the actors of one proc


def _gate(name: str) -> threading.Event:
    return _GATES.setdefault(name, threading.Event())


class Gate(Actor):
    """A sync actor that can block until another actor of its proc opens a gate."""

    @endpoint
    def wait(self, name: str) -> str:
        return "opened" if _gate(name).wait(20) else "still shut"

    @endpoint
    def open(self, name: str) -> str:
        _gate(name).set()
        return "open"

    @endpoint
    def echo(self, x: Any) -> Any:
        return x

    @endpoint
    def taken(self) -> int:
        """Frames this proc's threads took from connections they read themselves."""
        return sum(c.taken for c in list(runtime().router.connections))

    @endpoint
    def handed_back(self) -> int:
        """Frames this proc's threads read themselves and gave back to the loop."""
        return sum(c.handed_back for c in list(runtime().router.connections))

    @endpoint
    def polled(self) -> bool:
        return runtime().router.poller is not None


class AsyncEcho(Actor):
    """An async actor: its calls are the loop's to read, never a sync actor's thread's."""

    @endpoint
    async def echo(self, x: Any) -> Any:
        return x
