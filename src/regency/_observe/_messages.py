"""The one system message of the observation service: a batch of rows for the store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._wire._messages import SystemMessage, system_message

__all__ = ["ObserveBatch"]


@system_message("observe_batch")
@dataclass(slots=True)
class ObserveBatch(SystemMessage):
    """From a proc to the controller: rows it recorded, ``(table, values)`` each."""

    rows: list[tuple[str, tuple[Any, ...]]]
