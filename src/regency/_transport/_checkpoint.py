"""Where compiled code lets the interpreter run pending signal handlers.

The interpreter runs a Python-level signal handler (Ctrl-C's ``KeyboardInterrupt``) at its
next periodic check, or when a system call it made is interrupted. Compiled code (the hot
path, ADR 0031) never passes that check: a signal that arrives while the main thread runs
it, just before the thread blocks in ``poll``, would be handled only when the poll returns,
maybe a minute later. So the main thread calls :func:`checkpoint` before it blocks; this
module is never compiled, and entering an interpreted function is such a check.
"""

from __future__ import annotations

import threading

__all__ = ["MAIN_ID", "SLICE_S", "checkpoint"]

MAIN_ID = threading.main_thread().ident  # the thread where signal handlers run
#: The main thread sleeps in slices this long (seconds), with a ``checkpoint()`` before
#: each: a signal that came just before a slice began waits for its end at most.
SLICE_S = 0.2


def checkpoint() -> None:
    """Do nothing, in interpreted code: pending signal handlers run on the way in."""
