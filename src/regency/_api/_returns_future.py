"""``returns_future``: an ``async def`` that returns a regency ``Future`` when called.

Calling the decorated function runs nothing: it copies the caller's context variables and
returns a Future. The first observer runs the body once, and every later one shares the
outcome:

* ``await fut`` runs it as a task on the awaiting loop;
* ``fut.get()`` runs it on the calling thread in a loop of its own (as ``asyncio.run``
  would), or, when that thread is already running a loop, on a short-lived helper thread. If
  that first ``get(timeout)`` times out, the body is cancelled and the Future fails with
  ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine, Generator
from typing import Any, ParamSpec, TypeVar

from .._runtime._completion import Completion
from ._future import Future

__all__ = ["returns_future"]

_RUNNING: set[asyncio.Task[None]] = set()  # tasks the loop holds only weakly

P = ParamSpec("P")
T = TypeVar("T")


class _Deferred(Future[T]):
    """A Future whose coroutine starts when it is first observed."""

    __slots__ = ("_body", "_claim", "_ctx")
    _body: Callable[[], Coroutine[Any, Any, T]] | None
    _ctx: contextvars.Context
    _claim: threading.Lock

    @classmethod
    def _deferred(cls, body: Callable[[], Coroutine[Any, Any, T]]) -> _Deferred[T]:
        self: _Deferred[T] = cls._from(Completion(f"the body of {body!r}"))  # type: ignore[assignment]
        self._body = body
        self._ctx = contextvars.copy_context()
        self._claim = threading.Lock()
        return self

    def _take(self) -> Callable[[], Coroutine[Any, Any, T]] | None:
        """The body, to the first caller only."""
        with self._claim:
            body, self._body = self._body, None
        return body

    async def _run(self, body: Callable[[], Coroutine[Any, Any, T]],
                   timeout: float | None) -> None:
        c = self._completion
        try:
            c.set_result(await asyncio.wait_for(body(), timeout))
        except asyncio.TimeoutError:
            c.set_exception(TimeoutError(f"no result within {timeout}s: the body was cancelled"))
        except BaseException as exc:  # the Future carries every outcome, as a call's does
            c.set_exception(exc)

    def _run_here(self, body: Callable[[], Coroutine[Any, Any, T]],
                  timeout: float | None) -> None:
        self._ctx.run(asyncio.run, self._run(body, timeout))

    def get(self, timeout: float | None = None) -> T:
        """Run the body if nobody has yet, then return its result (see the module doc)."""
        body = self._take()
        if body is not None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                self._run_here(body, timeout)
            else:
                helper = threading.Thread(target=self._run_here, args=(body, timeout),
                                          name="regency-returns-future", daemon=True)
                helper.start()
        return super().get(timeout)

    result = get

    def __await__(self) -> Generator[Any, None, T]:
        body = self._take()
        if body is not None:
            loop = asyncio.get_running_loop()
            task = self._ctx.run(loop.create_task, self._run(body, None))
            _RUNNING.add(task)
            task.add_done_callback(_RUNNING.discard)
        return (yield from super().__await__())

    def as_asyncio(self) -> asyncio.Future[T]:
        """Start the body on the running loop if nobody has, and wrap the outcome."""
        body = self._take()
        if body is not None:
            task = self._ctx.run(asyncio.get_running_loop().create_task, self._run(body, None))
            _RUNNING.add(task)
            task.add_done_callback(_RUNNING.discard)
        return super().as_asyncio()


def returns_future(
    function: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Future[T]]:
    """Make an ``async def`` return a regency :class:`Future` (usable from sync and async code).

    ::

        @returns_future
        async def total(mesh) -> int:
            return sum((await mesh.value.call()).values())

        total(counters).get()      # from plain code
        await total(counters)      # from a coroutine

    Raises:
        TypeError: ``function`` is not an ``async def``.
    """
    if not inspect.iscoroutinefunction(function):
        raise TypeError(f"returns_future requires an async function (async def), got {function!r}")

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return _Deferred._deferred(functools.partial(function, *args, **kwargs))

    return wrapper
