"""Rate-limited log lines: at most N lines per key per interval, then a count of the rest.

A hostile or broken peer can make the same line happen thousands of times a second (one per
refused connection, one per garbage frame). :class:`RateLimitedLog` lets the first
``burst`` lines of a key through in each ``interval`` and counts the others; the next line
of that key that gets through says how many were suppressed since. Thread-safe; keys are
forgotten once their interval is over, so a flood of distinct keys costs bounded memory
(at most ``max_keys`` are tracked; past that, every line of an untracked key counts under
one shared key).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["RateLimitedLog", "notices", "warnings_on_stderr"]

_OVERFLOW = "\0overflow"


class RateLimitedLog:
    """Logs through ``logger`` with at most ``burst`` lines per key per ``interval`` s."""

    def __init__(self, logger: logging.Logger, burst: int = 5, interval: float = 10.0,
                 max_keys: int = 1024, clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.burst = burst
        self.interval = interval
        self.max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        # key -> [window start, lines let through in it, lines suppressed not yet reported]
        self._keys: dict[str, list[float]] = {}

    def log(self, level: int, key: str, msg: str, *args: object,
            exc_info: bool = False) -> bool:
        """Log ``msg % args`` at ``level`` unless ``key`` is over its budget; returns whether
        the line was written (with the exception being handled, if ``exc_info``)."""
        now = self._clock()
        with self._lock:
            state = self._keys.get(key)
            if state is None:
                if len(self._keys) >= self.max_keys:
                    self._expire(now)
                if len(self._keys) >= self.max_keys:
                    key = _OVERFLOW
                    state = self._keys.get(key)
                if state is None:
                    state = self._keys[key] = [now, 0.0, 0.0]
            if now - state[0] >= self.interval:
                state[0], state[1] = now, 0.0
            if state[1] >= self.burst:
                state[2] += 1
                return False
            state[1] += 1
            suppressed = int(state[2])
            state[2] = 0.0
        if suppressed:
            msg = f"{msg} ({suppressed} similar lines suppressed)"
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def warning(self, key: str, msg: str, *args: object) -> bool:
        """``log(logging.WARNING, ...)``."""
        return self.log(logging.WARNING, key, msg, *args)

    def suppressed(self, key: str) -> int:
        """How many lines of ``key`` were suppressed and not reported yet."""
        with self._lock:
            state = self._keys.get(key)
            return int(state[2]) if state is not None else 0

    def _expire(self, now: float) -> None:
        """Forget keys whose window is over and that have nothing left to report."""
        for key in [k for k, s in self._keys.items()
                    if now - s[0] >= self.interval and not s[2]]:
            del self._keys[key]


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a line is written (a test's capture, a
    proc's redirected stream), not to the one there when it was made."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _stderr_handler() -> logging.Handler:
    """A handler writing the message alone to the current stderr."""
    handler = _Stderr()
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


def _on_stderr(name: str) -> logging.Logger:
    logger = logging.getLogger(name)
    if not logger.handlers:
        logger.addHandler(_stderr_handler())
        logger.propagate = False  # once, even where the program configures logging
    return logger


class _UnlessConfigured(logging.Filter):
    """Passes a record only where no other handler would take it: none on its logger or
    the loggers it propagates to (the root included), but this one and ``NullHandler``s."""

    def __init__(self, mine: logging.Handler) -> None:
        super().__init__()
        self.mine = mine

    def filter(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(h is not self.mine and not isinstance(h, logging.NullHandler)
                   for h in logger.handlers):
                return False
            logger = logger.parent if logger.propagate else None
        return True


def warnings_on_stderr(name: str = "regency") -> None:
    """In a process regency runs for its user (a proc): write the ``name`` logger's
    warnings and errors to stderr (which reaches the controller's terminal), unless the
    program configures logging itself; then they go where it says, once.

    A library stays quiet by default (the ``NullHandler`` of ``regency/__init__``): this is
    for regency's own processes only.
    """
    handler = _stderr_handler()
    handler.setLevel(logging.WARNING)
    handler.addFilter(_UnlessConfigured(handler))
    logging.getLogger(name).addHandler(handler)


#: Rate-limited lines on this process's stderr, whatever the logging set-up: what a user
#: must see from a proc (whose stderr reaches the controller's terminal), which the
#: ``regency`` logger, quiet unless the program configures logging, would swallow.
notices = RateLimitedLog(_on_stderr("regency.notices"))
