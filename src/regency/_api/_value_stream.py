"""``ValueStream``: what ``endpoint.stream()`` returns, the futures of one call's replies.

Monarch's ``stream()`` gives a ``ValueStream`` too: an iterator whose ``next()`` is the
future of the next reply to arrive. Ours adds :meth:`ValueStream.cancel`, which takes the
rest of the call back (ADR 0036): a stream's single futures stand for "the k-th reply to
arrive", not for one member, so one of them cannot be cancelled alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from ._cancel import cancel_call
from ._future import Future

__all__ = ["ValueStream"]

R = TypeVar("R")


class ValueStream(Iterator[Future[R]], Generic[R]):
    """The futures of a ``stream()`` call: one per member, the k-th resolving with the k-th
    reply to arrive (whichever member sent it).

    Iterate it for the futures; ``cancel()`` cancels the members that have not answered."""

    __slots__ = ("_call", "_futures", "_next")

    def __init__(self, futures: list[Future[R]], call: Any = None) -> None:
        self._futures = futures
        self._next = 0
        self._call = call  # the call's collector (``_endpoint._Stream``); None: not a call

    def __iter__(self) -> ValueStream[R]:
        return self

    def __next__(self) -> Future[R]:
        k = self._next
        if k >= len(self._futures):
            raise StopIteration
        self._next = k + 1
        return self._futures[k]

    def __length_hint__(self) -> int:
        return len(self._futures) - self._next

    def cancel(self) -> bool:
        """Cancel the call for the members that have not answered: the futures not resolved
        yet raise ``concurrent.futures.CancelledError``; those members skip the call if it
        is still queued, or get ``asyncio.CancelledError`` in an async endpoint running it
        (as ``Future.cancel()``). Replies that arrived stay.

        Returns False, changing nothing, when no future is left to resolve: every reply is
        in, or a member's death failed the rest (as for a call's future, the members still
        running it are not told), and for a tensor-engine call's stream."""
        call = self._call
        return call is not None and cancel_call(call)

    def __repr__(self) -> str:
        done = sum(f.done() for f in self._futures)
        return (f"<ValueStream: {len(self._futures)} replies, {done} in, "
                f"{self._next} taken>")
