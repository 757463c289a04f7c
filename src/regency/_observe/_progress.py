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
    on a daemon thread; None when the stream is not a terminal. The closing line is written
    by whichever thread completes the spawn, at once, so it is not lost when the program
    goes on (or ends) right after the spawn."""
    out = stream if stream is not None else sys.stderr
    try:
        if not out.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    line = _Line(state, total, hosts, name, out)
    thread = threading.Thread(target=line.run, name="regency-spawn-progress", daemon=True)
    thread.start()
    state.ready.add_done_callback(line.finish)
    return thread


class _Line:
    """The progress line of one spawn: redrawn by its thread, closed on completion."""

    def __init__(self, state: Any, total: int, hosts: int, name: str, out: TextIO) -> None:
        self.state, self.total, self.hosts, self.name, self.out = state, total, hosts, name, out
        self.start = time.monotonic()
        self.lock = threading.Lock()
        self.shown = False
        self.closed = False

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):  # the terminal went away
            self.closed = True

    def run(self) -> None:
        """Redraw every ``TICK_S`` once the spawn has taken ``DELAY_S``."""
        while True:
            time.sleep(TICK_S)
            with self.lock:
                if self.closed:
                    return
                elapsed = time.monotonic() - self.start
                if elapsed >= DELAY_S:
                    up = self.total - max(int(self.state.waiting), 0)
                    self._write("\r\033[K" + progress_line(self.name, up, self.total,
                                                            self.hosts, elapsed))
                    self.shown = True

    def finish(self, ready: Any) -> None:
        """The spawn is done (or failed): close the line, if one was drawn."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            if self.shown:
                up = self.total - max(int(self.state.waiting), 0)
                failed = ready.exception() is not None
                self._write("\r\033[K" + progress_line(
                    self.name, up, self.total, self.hosts, time.monotonic() - self.start,
                    True, failed) + "\n")
