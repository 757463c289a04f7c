"""Waiting for processes to be gone, by pid, without racing their exit."""

from __future__ import annotations

from collections.abc import Iterable

import psutil


def running(pids: Iterable[int]) -> list[psutil.Process]:
    """The processes of ``pids`` still there (one may exit between a look and a handle)."""
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return procs


def still_alive(pids: Iterable[int], extra: Iterable[psutil.Process] = (),
                timeout: float = 30.0) -> list[psutil.Process]:
    """Wait (at most ``timeout``) for ``pids`` and ``extra`` to exit; those that did not."""
    _gone, alive = psutil.wait_procs([*running(pids), *extra], timeout=timeout)
    return alive
