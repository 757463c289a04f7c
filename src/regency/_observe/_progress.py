"""A progress line while a proc mesh spawns: ``spawning trainers: 130/256 procs up (2 hosts)``.

Shown on the controller's stderr when it is a terminal, for spawns still running after
``DELAY_S`` (quick ones print nothing), redrawn in place every ``TICK_S``, and closed with a
summary line. Quiet when stderr is not a TTY. It reads the mesh's countdown of procs still
to come up; it adds nothing to the spawn itself.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

__all__ = ["progress_line", "watch_spawn"]

DELAY_S = 0.3
TICK_S = 0.1


def progress_line(name: str, up: int, total: int, hosts: int, elapsed: float,
                  done: bool = False, failed: bool = False) -> str:
    """The text of the progress line."""
    where = f"{hosts} host" + ("s" if hosts != 1 else "")
    if failed:
        return f"spawning {name}: failed after {up}/{total} procs up ({where}, {elapsed:.1f}s)"
    if done:
        return f"spawned {name}: {total} procs up on {where} in {elapsed:.1f}s"
    width = 20
    filled = width * up // max(total, 1)
    bar = "#" * filled + "." * (width - filled)
    return f"spawning {name}: [{bar}] {up}/{total} procs up ({where}, {elapsed:.1f}s)"


def watch_spawn(state: Any, total: int, hosts: int, name: str,
                stream: TextIO | None = None) -> threading.Thread | None:
    """Draw the progress of ``state`` (a MeshState: ``waiting``, ``ready``) while it spawns,
    on a daemon thread; None when the stream is not a terminal."""
    out = stream if stream is not None else sys.stderr
    try:
        if not out.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    thread = threading.Thread(target=_draw, args=(state, total, hosts, name, out),
                              name="regency-spawn-progress", daemon=True)
    thread.start()
    return thread


def _draw(state: Any, total: int, hosts: int, name: str, out: TextIO) -> None:
    start = time.monotonic()
    shown = False
    while True:
        done = state.ready.done()
        elapsed = time.monotonic() - start
        up = total - max(int(state.waiting), 0)
        if done:
            if shown:
                failed = state.ready.exception() is not None
                out.write("\r\033[K" + progress_line(name, up, total, hosts, elapsed, True,
                                                      failed) + "\n")
                out.flush()
            return
        if elapsed >= DELAY_S:
            out.write("\r\033[K" + progress_line(name, up, total, hosts, elapsed))
            out.flush()
            shown = True
        time.sleep(TICK_S)

