"""The system messages of the observation service: rows for the store, and a flush request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._wire._messages import SystemMessage, system_message

__all__ = ["ObserveBatch", "ObserveFlush"]


@system_message("observe_batch")
@dataclass(slots=True)
class ObserveBatch(SystemMessage):
    """From a proc to the controller: rows it recorded, ``(table, values)`` each."""

    rows: list[tuple[str, tuple[Any, ...]]]


@system_message("observe_flush")
@dataclass(slots=True)
class ObserveFlush(SystemMessage):
    """From the controller to a proc: send what you recorded now, then the marker row
    ``("job", ("flushed:<token>:<proc address>", ts))``; when the marker is in the store,
    so is everything the proc recorded before it (one ordered connection)."""

    token: str
