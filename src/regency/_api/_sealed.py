"""An endpoint's exception, sealed so that the caller gets it even where it cannot be rebuilt.

An exception may pickle at the callee and still fail to unpickle at the caller: a class whose
``__init__`` needs more arguments than it passes to ``Exception.__init__``, or one defined in
a module the caller cannot import. Unpickled as part of the reply, it would spoil the whole
reply. So the callee pickles it on its own (``seal``) and the reply carries those bytes with
its type name and text; at the caller ``_unseal`` rebuilds it or, failing that, stands in a
``RuntimeError`` that names the remote type, its message and why it could not be rebuilt
(the reply's ``ActorError`` carries the remote traceback as text either way).
"""

from __future__ import annotations

from typing import Any

from .._runtime._pickling import dumps_inband, loads

__all__ = ["seal"]


class _Sealed:
    """Pickles as a call to ``_unseal`` with the exception's own pickle (callee side)."""

    __slots__ = ("data", "text", "type_name")

    def __init__(self, data: bytes, type_name: str, text: str) -> None:
        self.data = data
        self.type_name = type_name
        self.text = text

    def __reduce__(self) -> tuple[Any, ...]:
        return _unseal, (self.data, self.type_name, self.text)


def seal(exc: BaseException) -> Any:
    """``exc`` wrapped so that a caller that cannot rebuild it still gets its text.

    Raises whatever pickling ``exc`` raises (the caller then sends its text alone).
    """
    return _Sealed(dumps_inband(exc), f"{type(exc).__module__}.{type(exc).__qualname__}",
                   str(exc))


def _unseal(data: bytes, type_name: str, text: str) -> BaseException:
    """The exception itself, or a ``RuntimeError`` naming it when it cannot be rebuilt."""
    try:
        exc = loads(data)
    except Exception as why:  # noqa: BLE001 - any failure to rebuild is reported the same way
        return RuntimeError(f"{type_name}: {text} (raised remotely; it could not be rebuilt "
                            f"here: {type(why).__name__}: {why})")
    if isinstance(exc, BaseException):
        return exc
    return RuntimeError(f"{type_name}: {text}")
