"""The reply ports of one runtime: who handles a reply to each, and whose death fails it.

A port is opened for every call that waits on a reply and closed when the reply is in, so
this table is on the path of every round trip; it is compiled with the hot path (ADR 0031),
and the call collectors that open and close ports reach it directly. ``Runtime.open_port``
and ``Runtime.close_port`` are the same operations for everything else.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ._borrow import ReadHere

__all__ = ["Ports"]


class Ports:
    """Open ports: their handlers, the addresses each waits on, and the call collectors."""

    __slots__ = ("_ids", "_read_here", "collectors", "handlers", "on_throttled", "targets",
                 "throttled", "untargeted")

    def __init__(self, read_here: ReadHere, throttled: set[Any]) -> None:
        self.handlers: dict[int, Callable[[Any, list[memoryview]], None]] = {}
        self.targets: dict[int, frozenset[str]] = {}  # port -> the addresses it waits on
        self.untargeted: set[int] = set()  # open ports that may be answered from anywhere
        self.collectors: dict[int, Any] = {}  # port -> the pending call waiting on it
        self.throttled = throttled  # the runtime's connections paused by flow control
        # told the targets of a port opened while some connection is throttled (ADR 0012)
        self.on_throttled: Callable[[frozenset[str]], None] | None = None
        self._read_here = read_here
        self._ids = itertools.count(1)

    def open(self, handler: Callable[[Any, list[memoryview]], None],
             targets: frozenset[str], any_thread: bool) -> int:
        """Register a port (see ``Runtime.open_port``); its id."""
        port_id: int = next(self._ids)
        self.handlers[port_id] = handler
        if any_thread:
            self._read_here.allow(port_id)
        if targets:
            self.targets[port_id] = targets
        else:
            self.untargeted.add(port_id)
        if self.throttled and self.on_throttled is not None:
            self.on_throttled(targets)  # its reply must not wait behind flow control
        return port_id

    def close(self, port_id: int) -> None:
        """Forget a port (late replies to it are dropped)."""
        self.handlers.pop(port_id, None)
        self.targets.pop(port_id, None)
        self.untargeted.discard(port_id)
        self._read_here.forget(port_id)
