"""Turning REPLY messages back into values and exceptions at the caller."""

from __future__ import annotations

from typing import Any

from .._runtime import _messages as m
from .._runtime._pickling import loads
from ..errors import ActorError, SupervisionError


def decode(frame: list[memoryview]) -> Any:
    """The value carried by a REPLY frame."""
    return loads(frame[1], frame[2:])


def to_exception(status: int, value: Any) -> BaseException:
    """The exception a non-OK reply stands for."""
    if status == m.ACTOR_ERROR:
        exc, type_name, text, tb, label = value
        if exc is None:
            exc = RuntimeError(f"{type_name}: {text}")
        return ActorError(exc, f"Actor call {label} failed.", tb)
    if status == m.RAW_ERROR:
        return value if isinstance(value, BaseException) else RuntimeError(str(value))
    if status == m.SUPERVISION:
        message, failure = value
        return SupervisionError(message, failure)
    return RuntimeError(f"unexpected reply status {status}")
