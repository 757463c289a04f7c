"""The last lines each worker host's proc printed, as they reached this controller.

A ``this_host()`` proc's failure report shows what it printed last from its host agent's
tail, which lives in the controller's process. A worker's agent lives elsewhere and
forwards the lines (``proc_output``): :data:`tails` keeps the last of them per proc, so a
worker proc's report shows them too. A proc's tail is retired when the proc ends (its exit
report carries its agent's own tail) or its agent is lost, and kept a while among the last
``ENDED`` procs' that ended: a report waiting for the proc's lines may read it only once
the proc has ended (a failure just before the controller stops its meshes).
"""

from __future__ import annotations

import collections
import threading

__all__ = ["KEEP", "Tails", "tails"]

#: Lines kept per proc (``tail_log_lines`` of them are shown; its default is 20).
KEEP = 200
#: Procs whose tails are kept after they ended.
ENDED = 32


class Tails:
    """``{proc address: its last lines}``, filled on the loop thread, read on any."""

    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._tails: dict[str, collections.deque[str]] = {}
        self._ended: collections.OrderedDict[str, collections.deque[str]] = (
            collections.OrderedDict())

    def add(self, proc: str, lines: list[str]) -> None:
        """``proc`` printed ``lines`` (stdout and stderr in one tail, as the agent's)."""
        with self._lock:
            tail = self._tails.get(proc)
            if tail is None:
                tail = self._tails[proc] = collections.deque(maxlen=self._keep)
            tail.extend(lines)

    def last(self, proc: str, n: int) -> list[str]:
        """The last ``n`` lines ``proc`` printed (fewer, or none, if it printed less)."""
        if n <= 0:
            return []
        with self._lock:
            tail = self._tails.get(proc) or self._ended.get(proc)
            return list(tail)[-n:] if tail is not None else []

    def forget(self, proc: str) -> None:
        """``proc`` ended: retire its lines (kept among the last ``ENDED`` procs')."""
        with self._lock:
            tail = self._tails.pop(proc, None)
            if tail is not None:
                self._retire(proc, tail)

    def forget_procs_of(self, agent: str) -> None:
        """The agent at ``agent`` is gone: retire the lines of the procs named after it."""
        prefix = f"via:{agent}/"
        with self._lock:
            for proc in [p for p in self._tails if p.startswith(prefix)]:
                self._retire(proc, self._tails.pop(proc))

    def _retire(self, proc: str, tail: collections.deque[str]) -> None:
        ended = self._ended
        ended[proc] = tail
        ended.move_to_end(proc)
        while len(ended) > ENDED:
            ended.popitem(last=False)


#: The controller's tails (one controller per process).
tails = Tails()
