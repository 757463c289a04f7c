"""User metrics and spans: ``get_meter``, ``span`` and ``traced``, as in ``monarch.actor``.

They record into the job's store (tables ``metrics`` and ``spans``) when the job records
(config ``observe``) and cost a check of one global otherwise. The meter follows the shape
of OpenTelemetry's (``create_counter``, ``create_up_down_counter``, ``create_histogram``,
``create_gauge``), without depending on it: a counter's ``add`` and a histogram's ``record``
are summed per flush (every half second), one row per instrument and attribute set.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, overload

from ._recorder import active

__all__ = ["Counter", "Histogram", "Meter", "Span", "UpDownCounter", "get_meter", "span",
           "traced"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
Attributes = dict[str, Any] | None


class _Instrument:
    kind = "counter"

    def __init__(self, name: str, unit: str = "", description: str = "") -> None:
        self.name = name
        self.unit = unit
        self.description = description

    def _record(self, amount: float, attributes: Attributes) -> None:
        rec = active()
        if rec is not None:
            rec.metric(self.name, self.kind, float(amount), attributes)


class Counter(_Instrument):
    """A monotonic sum."""

    kind = "counter"

    def add(self, amount: float, attributes: Attributes = None, context: Any = None) -> None:
        """Add ``amount`` (not negative)."""
        if amount < 0:
            raise ValueError(f"counter {self.name!r}: add() takes amounts >= 0, got {amount}")
        self._record(amount, attributes)


class UpDownCounter(_Instrument):
    """A sum that may go down."""

    kind = "updown"

    def add(self, amount: float, attributes: Attributes = None, context: Any = None) -> None:
        """Add ``amount`` (any sign)."""
        self._record(amount, attributes)


class Histogram(_Instrument):
    """Recorded values: each flush stores their sum and count."""

    kind = "histogram"

    def record(self, amount: float, attributes: Attributes = None,
               context: Any = None) -> None:
        """Record one value."""
        self._record(amount, attributes)


class Gauge(_Instrument):
    """The last value set."""

    kind = "gauge"

    def set(self, amount: float, attributes: Attributes = None, context: Any = None) -> None:
        """Set the value."""
        self._record(amount, attributes)


class Meter:
    """Makes instruments (the process has one, from :func:`get_meter`)."""

    def __init__(self, name: str = "regency") -> None:
        self.name = name

    def create_counter(self, name: str, unit: str = "", description: str = "") -> Counter:
        """A counter named ``name``."""
        return Counter(name, unit, description)

    def create_up_down_counter(self, name: str, unit: str = "",
                               description: str = "") -> UpDownCounter:
        """An up-down counter named ``name``."""
        return UpDownCounter(name, unit, description)

    def create_histogram(self, name: str, unit: str = "", description: str = "", *,
                         explicit_bucket_boundaries_advisory: Any = None) -> Histogram:
        """A histogram named ``name``."""
        return Histogram(name, unit, description)

    def create_gauge(self, name: str, unit: str = "", description: str = "") -> Gauge:
        """A gauge named ``name``."""
        return Gauge(name, unit, description)


_METER = Meter()


def get_meter() -> Meter:
    """This process's meter: instruments made from it record into the job's store."""
    return _METER


def _actor_id() -> str | None:
    from .._api._context import _current

    ctx = _current.get(None)
    return None if ctx is None else ctx.actor_instance.actor_id


class Span:
    """A named stretch of time in the current actor: ``with span("load"): ...``."""

    __slots__ = ("_start", "actor", "name")

    def __init__(self, name: str, actor: str | None = None) -> None:
        self.name = name
        self.actor = actor
        self._start = 0

    def __enter__(self) -> Span:
        self._start = time.time_ns() // 1000
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        rec = active()
        if rec is not None:
            rec.add("spans", (self._start, time.time_ns() // 1000, rec.proc,
                              self.actor or _actor_id(), self.name, threading.get_ident()))


def span(name: str) -> Span:
    """A span named ``name`` in the current actor (a context manager)."""
    return Span(name)


@overload
def traced(fn: Callable[_P, _R]) -> Callable[_P, _R]: ...


@overload
def traced(*, name: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]: ...


def traced(fn: Callable[_P, _R] | None = None, *, name: str | None = None
           ) -> Callable[_P, _R] | Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Wrap a function (sync or async) in a span named ``name`` or after the function."""

    def decorator(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        label = name if name is not None else fn.__name__
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(*args: _P.args, **kwargs: _P.kwargs) -> Any:
                with span(label):
                    return await fn(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with span(label):
                result = fn(*args, **kwargs)
            return result

        return run

    if fn is not None:
        return decorator(fn)
    return decorator
