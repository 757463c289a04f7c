"""``Future``: the result of every messaging adverb; ``get()`` from threads, ``await`` in loops."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import threading
import time
import warnings
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

from .._debug._stacks import where_stuck
from .._runtime._completion import Completion
from .._runtime._output_catchup import book as lines
from .._transport._checkpoint import MAIN_ID
from . import _failfast

_running_loop = asyncio._get_running_loop  # None outside a running loop, and never raises

_log = logging.getLogger("regency")

__all__ = ["Future"]

R = TypeVar("R")

#: Set by ``_endpoint``: the problem with waiting on a call (``(call, awaiting) -> text or
#: None``, where ``call`` is the call's collector), for futures made by ``Future._of_call``.
call_problem: Callable[[Any, bool], str | None] | None = None

#: Set by ``_endpoint``: ``(completion, call, timeout) -> bool``, the wait of a call's future
#: outside a running asyncio loop (``call_problem``, then the wait; False on timeout).
wait_call: Callable[[Completion, Any, float | None], bool] | None = None

#: Set by ``_endpoint``: ``(completion, call) -> generator``, the ``await`` of a call's future
#: (in an actor's handler, a wait that lasts is probed for a cycle of calls: ``_waits``).
watch_await: Callable[[Completion, Any], Generator[Any, None, Any]] | None = None

#: Set by ``_cancel``: ``(call) -> bool``, cancel a call's future and its remote work.
cancel_call: Callable[[Any], bool] | None = None

#: Set by ``_endpoint``: ``(completion, timeout) -> bool``, ``completion.wait`` telling
#: fail-fast what the main thread is blocked on (see ``_failfast``); after a wait that ended
#: with a result, ``get`` clears ``_failfast.waiting`` once it returned or raised it.
wait_blocking: Callable[[Completion, float | None], bool] | None = None


class CallCancelled(concurrent.futures.CancelledError):
    """What a cancelled call's future raises (``Future.cancel``, ``ValueStream.cancel``): a
    ``concurrent.futures.CancelledError``, told apart from one an endpoint raised."""


class Future(Generic[R]):
    """The eventual result of a remote operation.

    Messages are sent eagerly: dropping a future does not cancel the work (``cancel()``
    does). ``get()`` blocks the calling thread only and raises the built-in
    ``TimeoutError`` on timeout without consuming the result; ``await`` works on any running
    asyncio loop, any number of times.
    """

    __slots__ = ("_blocking_guard", "_call", "_completion")
    _completion: Completion
    _blocking_guard: Callable[[], str | None] | None
    _call: Any  # a call's collector (None for other futures): what its waiters ask about

    def __init__(self, *_: Any, **__: Any) -> None:
        raise TypeError(
            "Future objects are returned by regency operations and cannot be constructed directly."
        )

    @classmethod
    def _from(cls, completion: Completion,
              blocking_guard: Callable[[], str | None] | None = None) -> Future[R]:
        self = object.__new__(cls)
        self._completion = completion
        self._blocking_guard = blocking_guard
        self._call = None
        return self

    @classmethod
    def _of_call(cls, completion: Completion, call: Any) -> Future[R]:
        """The future of an endpoint call: it knows its call's collector (no guard object
        beside it; ``call_problem`` says why waiting on it would hang)."""
        self = object.__new__(cls)
        self._completion = completion
        self._blocking_guard = None
        self._call = call
        return self

    def _problem(self, awaiting: bool) -> str | None:
        """Why waiting on this future would never end, if it would not."""
        if self._call is not None:
            return call_problem(self._call, awaiting) if call_problem is not None else None
        guard = self._blocking_guard
        if guard is None:
            return None
        if awaiting:
            awaiting_problem = getattr(guard, "awaiting", None)
            return awaiting_problem() if awaiting_problem is not None else None
        return guard()

    def get(self, timeout: float | None = None) -> R:
        """Block until the result is there and return it (or raise its exception).

        If a worker host's proc printed before it answered, the lines it printed are
        written first (up to 1 s more, ``order_output``).

        Raises:
            TimeoutError: ``timeout`` seconds passed; names what is still pending. The future
                is not consumed: a later ``get()`` can still return the result.
            concurrent.futures.CancelledError: ``cancel()`` cancelled the call.
            regency.errors.DeadlineExceeded: the call was sent in a ``deadline()`` block
                and not answered in time (a ``TimeoutError`` too, but the call is over).
            KeyboardInterrupt: Ctrl-C while it waited; the call is cancelled, as by
                ``cancel()``.
            ValueError: ``timeout`` is negative or not finite.
        """
        if timeout is not None:
            _check_timeout(timeout)
        c = self._completion
        if not c.done():
            try:
                waited = self._wait(c, timeout)
            except KeyboardInterrupt:
                self.cancel()  # Ctrl-C takes the call back: a notebook's next cell is not
                raise  # queued behind it (ADR 0036)
            if not waited:
                label = c.describe()
                what = f": still waiting for {label}" if label else ""
                raise TimeoutError(f"no result within {timeout}s{what}"
                                   f"{where_stuck(c.label, timeout)}")
            if _failfast.waiting is c:  # the main thread waited: see ``wait_blocking``
                try:
                    if lines.behind:
                        lines.wait()
                    return c.outcome()  # type: ignore[no-any-return,unused-ignore]
                finally:
                    _failfast.waiting = None
        if lines.behind:  # a worker's proc printed before it answered (_output_catchup)
            lines.wait()
        return c.outcome()  # type: ignore[no-any-return,unused-ignore]

    def _wait(self, c: Completion, timeout: float | None) -> bool:
        call = self._call
        if call is not None and wait_call is not None and _running_loop() is None:
            return wait_call(c, call, timeout)  # the same steps, compiled
        self._guard_blocking()
        return c.wait(timeout) if wait_blocking is None else wait_blocking(c, timeout)

    def _guard_blocking(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        problem = self._problem(False)
        if problem:
            raise RuntimeError(problem)
        if loop is not None:
            warnings.warn(
                "Future.get() was called from within an active event loop; it blocks that "
                "loop. Use `await` instead.",
                UserWarning,
                stacklevel=3,
            )

    result = get

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait like ``get()`` and return the exception, or None on success."""
        try:
            self.get(timeout)
        except TimeoutError:
            if not self._completion.done():
                raise
            return self._completion.exception()
        except BaseException as exc:
            c = self._completion
            if isinstance(exc, (KeyboardInterrupt, SystemExit)) and c.exception() is not exc:
                raise  # Ctrl-C or a fail-fast exit while it waited, not the call's exception
            return exc
        return None

    def done(self) -> bool:
        """Whether the result (or exception) is there."""
        return self._completion.done()

    def cancel(self) -> bool:
        """Cancel the call: its ``get()`` and ``await`` raise
        ``concurrent.futures.CancelledError`` from now on, and each member that has not
        answered stops it: a call still queued is skipped, an async endpoint running it gets
        ``asyncio.CancelledError`` at its ``await``; a sync endpoint running it runs to its
        end, and its reply is dropped.

        Returns True for a future cancelled already; False, changing nothing, for one done
        otherwise or not the future of a call (``stop()``'s, a stream's, the tensor
        engine's).
        """
        if self._completion.done():
            return self.cancelled()
        call = self._call
        if call is None or cancel_call is None:
            return False
        return cancel_call(call)

    def cancelled(self) -> bool:
        """Whether ``cancel()`` cancelled it (or ``ValueStream.cancel()``, a stream's)."""
        c = self._completion
        return c.done() and isinstance(c.exception(), CallCancelled)

    def add_callback(self, callback: Callable[[Future[R]], object]) -> None:
        """Call ``callback(self)`` once the result (or exception) is there: at once if it is
        already, else on the thread that completes it (regency's runtime thread: keep it
        short and never block in it). An exception the callback raises is logged."""
        def run(_: Completion) -> None:
            try:
                callback(self)
            except Exception:
                _log.exception("regency: exception in a Future callback")

        self._completion.add_done_callback(run)

    def as_asyncio(self) -> asyncio.Future[R]:
        """An ``asyncio.Future`` on the running loop (for ``gather``, ``wait_for``).
        Cancelling it (``wait_for``'s timeout, say) cancels the call, as :meth:`cancel`."""
        fut = self._completion.as_asyncio()
        if self._call is not None:
            fut.add_done_callback(self._on_asyncio_done)
        return fut

    def _on_asyncio_done(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            self._cancel_with_waiter()

    def _cancel_with_waiter(self) -> None:
        """What waited for this call in asyncio was cancelled: cancel the call too (a
        nested call of a cancelled endpoint, a ``wait_for`` that timed out)."""
        if self._call is not None and not self._completion.done():
            self.cancel()

    def __await__(self) -> Generator[Any, None, R]:
        c = self._completion
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise ValueError("__await__ with no active event loop") from None
        if c.done():
            if lines.behind:  # a worker's proc printed before it answered (_output_catchup)
                yield from lines.caught_up().__await__()
            return c.outcome()  # type: ignore[no-any-return,unused-ignore]
        problem = self._problem(True)
        if problem:
            raise RuntimeError(problem)
        main = threading.get_ident() == MAIN_ID
        if main:  # the controller's script awaits it: the hang notice looks (``_hang_notice``)
            _failfast.awaited[c] = time.monotonic()
        try:
            if self._call is not None and watch_await is not None:
                value = yield from watch_await(c, self._call)  # probed if it lasts
            else:
                value = yield from c.as_asyncio().__await__()
        except asyncio.CancelledError:
            self._cancel_with_waiter()  # the awaiting task was cancelled: so is the call
            raise
        finally:
            if main:
                _failfast.awaited.pop(c, None)
        if lines.behind:
            yield from lines.caught_up().__await__()
        return value  # type: ignore[no-any-return,unused-ignore]

    def __repr__(self) -> str:
        state = "done" if self._completion.done() else "pending"
        return f"<regency.Future {state}>"


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and (not math.isfinite(timeout) or timeout < 0):
        raise ValueError(f"invalid timeout {timeout!r}: a timeout is a finite number >= 0 seconds")


def completed(value: Any) -> Future[Any]:
    """A future that is already done with ``value``."""
    c = Completion()
    c.set_result(value)
    return Future._from(c)


def failed(exc: BaseException) -> Future[Any]:
    """A future that is already done with ``exc``."""
    c = Completion()
    c.set_exception(exc)
    return Future._from(c)
