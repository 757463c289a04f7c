"""What keeps a listener serving under attack or exhaustion (issue 19, ADR 0016).

* :func:`transient_accept_error` and :class:`Backoff`: an ``accept`` that fails for want of
  file descriptors or memory (EMFILE, ENFILE, ENOMEM, ENOBUFS) is retried after a pause that
  starts at 10 ms and doubles to 1 s, reset by the next success. The listening socket stays
  readable while connections wait in its backlog, so retrying at once would spin.
* :class:`Admission`: the connections still in their handshake (not authenticated) are
  bounded, overall and per source address. A new connection over a bound closes the *oldest*
  pending one (of its source, or overall): a peer that opens connections and stalls
  (slowloris) only ever evicts its own, while a good peer's handshake, which takes
  milliseconds, completes long before enough new connections arrive to evict it.
* :class:`Failures`: each failed handshake from a source makes the next refusal to it wait
  longer (10 ms doubling to 1 s, forgotten after a minute of quiet), so that guessing the
  secret online costs at most ``max_per_source`` attempts a second per source.
"""

from __future__ import annotations

import errno
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Admission", "Backoff", "Failures", "transient_accept_error"]

T = TypeVar("T")

#: ``accept`` errors that say "not now" (resources), not "this listener is broken".
TRANSIENT_ACCEPT_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
)
#: ``accept`` errors about one connection that went away before it was taken: skip it.
SKIP_ACCEPT_ERRNOS = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EINTR})


def transient_accept_error(exc: OSError) -> bool:
    """True when ``accept`` failed for want of descriptors or memory: back off and retry."""
    return exc.errno in TRANSIENT_ACCEPT_ERRNOS


class Backoff:
    """Pauses that double from ``first`` to ``cap`` seconds; :meth:`reset` starts over."""

    def __init__(self, first: float = 0.01, cap: float = 1.0) -> None:
        self.first = first
        self.cap = cap
        self._next = first
        self.failures = 0  # since the last reset
        self.since: float | None = None  # monotonic time of the first failure of the episode

    def next(self) -> float:
        """The pause before the next attempt (and count one failure)."""
        if self.since is None:
            self.since = time.monotonic()
        self.failures += 1
        delay = self._next
        self._next = min(self._next * 2, self.cap)
        return delay

    @property
    def in_episode(self) -> bool:
        """True between a failure and the next :meth:`reset`."""
        return self.since is not None

    def reset(self) -> None:
        """A success: the next failure starts a new episode at ``first``."""
        self._next = self.first
        self.failures = 0
        self.since = None


class Admission(Generic[T]):
    """Bounds the connections in their handshake, overall and per source (thread-safe).

    ``source`` is the peer's address (its IP for TCP) or ``None`` for a local (Unix socket)
    peer, which counts only against the overall bound.
    """

    def __init__(self, max_pending: int, max_per_source: int) -> None:
        if max_pending < 1 or max_per_source < 1:
            raise ValueError("handshake limits must be at least 1")
        self.max_pending = max_pending
        self.max_per_source = max_per_source
        self._pending: OrderedDict[T, str | None] = OrderedDict()  # oldest first
        self._per_source: dict[str, int] = {}
        self._lock = threading.Lock()
        self.evicted = 0  # how many pending handshakes were closed to make room

    def admit(self, item: T, source: str | None) -> list[T]:
        """Count ``item`` as pending; returns the older pending items to close for it."""
        evict: list[T] = []
        with self._lock:
            if source is not None and self._per_source.get(source, 0) >= self.max_per_source:
                for old, src in self._pending.items():
                    if src == source:
                        evict.append(old)
                        break
                for old in evict:
                    self._forget(old)
            while len(self._pending) >= self.max_pending:
                old = next(iter(self._pending))
                evict.append(old)
                self._forget(old)
            self._pending[item] = source
            if source is not None:
                self._per_source[source] = self._per_source.get(source, 0) + 1
            self.evicted += len(evict)
        return evict

    def done(self, item: T) -> None:
        """``item`` finished its handshake (or failed it); a no-op if it was evicted."""
        with self._lock:
            self._forget(item)

    def pending(self, source: str | None = None) -> int:
        """How many handshakes are pending (from ``source``, when given)."""
        with self._lock:
            if source is None:
                return len(self._pending)
            return self._per_source.get(source, 0)

    def _forget(self, item: T) -> None:
        source = self._pending.pop(item, None)
        if source is not None:
            left = self._per_source[source] - 1
            if left:
                self._per_source[source] = left
            else:
                del self._per_source[source]


class Failures:
    """Failed handshakes per source, and how long to wait before refusing the next one.

    Bounded memory: at most ``max_sources`` sources are remembered (the oldest forgotten).
    """

    def __init__(self, first: float = 0.01, cap: float = 1.0, forget_after: float = 60.0,
                 max_sources: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self.first = first
        self.cap = cap
        self.forget_after = forget_after
        self.max_sources = max_sources
        self._clock = clock
        self._lock = threading.Lock()
        self._sources: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def penalty(self, source: str | None) -> float:
        """Record a failure from ``source``; returns the seconds to wait before refusing it."""
        key = source if source is not None else "local"
        now = self._clock()
        with self._lock:
            count, last = self._sources.pop(key, (0, now))
            if now - last > self.forget_after:
                count = 0
            count += 1
            self._sources[key] = (count, now)
            while len(self._sources) > self.max_sources:
                self._sources.popitem(last=False)
        return min(self.cap, self.first * 2 ** min(count - 1, 30))
