"""Turning REPLY messages back into values and exceptions at the caller."""

from __future__ import annotations

import linecache
import re
from typing import Any

from .._runtime._pickling import loads
from .._runtime._script import script
from .._wire import _messages as m
from ..errors import ActorError, SupervisionError

_DYNAMIC = re.compile(r'^(\s*)File "<dynamic-code>", line (\d+), in (\S+)$')


def with_sources(tb: str) -> str:
    """Name the script for frames of classes pickled by value from ``__main__``.

    cloudpickle drops their file names (``<dynamic-code>``); the controller's script is
    where they came from, so its path and source line are put back when they match.
    """
    path = script()
    if "<dynamic-code>" not in tb or not path:
        return tb
    out: list[str] = []
    for line in tb.splitlines():
        found = _DYNAMIC.match(line)
        if found is None:
            out.append(line)
            continue
        indent, number, func = found.groups()
        source = linecache.getline(path, int(number)).strip()
        if not source:
            out.append(line)
            continue
        out.append(f'{indent}File "{path}", line {number}, in {func}')
        out.append(f"{indent}  {source}")
    return "\n".join(out) + ("\n" if tb.endswith("\n") else "")


def decode(frame: list[memoryview]) -> Any:
    """The value carried by a REPLY frame."""
    return loads(frame[1], frame[2:])


def to_exception(status: int, value: Any) -> BaseException:
    """The exception a non-OK reply stands for."""
    if status == m.ACTOR_ERROR:
        exc, type_name, text, tb, label = value
        if exc is None:
            exc = RuntimeError(f"{type_name}: {text}")
        call, _, where = str(label).partition(" on ")  # Monarch's words, then which member
        message = f"Actor call {call} failed." + (f" (on {where})" if where else "")
        return ActorError(exc, message, with_sources(tb))
    if status == m.RAW_ERROR:
        return value if isinstance(value, BaseException) else RuntimeError(str(value))
    if status == m.SUPERVISION:
        message, failure = value
        return SupervisionError(message, failure)
    return RuntimeError(f"unexpected reply status {status}")
