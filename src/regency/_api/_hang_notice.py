"""A notice when the controller's main thread has waited long for one result.

A call that never answers while its callee lives (a rank stuck in a collective, a
deadlock the probes cannot see, a lock) is the one wait supervision cannot end: the
callee is healthy as far as anyone can tell. Rather than sit there silently, once the
main thread has been blocked in ``get()`` on the same result (or its asyncio code has
awaited one) for ``hang_notice_after`` seconds, the controller prints, once for that
wait, what it waits for and where each callee is now: their stacks, grouped
(``where_stuck``, as a ``TimeoutError`` shows them).
It is a notice, not an error: the wait goes on. Nothing is told while a proc of the job is
paused at a breakpoint (the wait is the user's own).

A timer of the runtime's loop samples what ``Future.get`` publishes for fail-fast
(``_failfast.waiting``) and what ``Future.__await__`` on the main thread notes
(``_failfast.awaited``); nothing is added to a blocking wait itself. The stacks are gathered on
a short-lived thread (the loop must stay free to receive them).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from .. import config
from .._debug._service import paused as debugger_paused
from .._debug._stacks import where_stuck
from .._runtime import _output
from .._runtime._runtime import Runtime
from . import _failfast

__all__ = ["HangNotice", "start"]

log = logging.getLogger("regency.hang")


class HangNotice:
    """Samples the main thread's wait every second at most (a quarter of
    ``hang_notice_after``, read at each sample: ``configure()`` changes it at once); tells
    of one that lasts."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._seen: Any = None  # the completion ``get()`` waited on at the last sample
        self._since = 0.0
        self._told: list[Any] = []  # the waits already told of, not done yet
        # awaits that began before the last notice of one are part of what it told (the
        # calls of one ``gather``, queued behind one another): one notice for them
        self._told_at = float("-inf")

    def tick(self) -> None:
        """One sample (loop thread); schedules the next."""
        rt = self.rt
        if rt.stopping:
            return
        after = float(config.get("hang_notice_after"))
        now = time.monotonic()
        waiting = _failfast.waiting
        if waiting is not self._seen:
            self._seen, self._since = waiting, now
        self._told = [c for c in self._told if not c.done()]
        # nothing to tell while off, or while a proc is paused in pdb (the user's own wait)
        if after > 0 and not debugger_paused():
            self._look(now, after)
        rt.loop.call_later(min(1.0, after / 4) if after > 0 else 1.0, self.tick)

    def _look(self, now: float, after: float) -> None:
        """Tell of the main thread's wait in ``get()``, or else of the oldest result its
        asyncio code awaits that began after the last such notice, once it has lasted
        ``after`` seconds."""
        if self._seen is not None and self._tell_if_long(self._seen, self._since, now, after):
            return
        awaited = _failfast.awaited
        items = list(awaited.items())  # one copy: the main thread changes it meanwhile
        items.sort(key=lambda item: item[1])
        for c, since in items:
            if c.done():  # its await never resumed (its loop stopped): nothing waits on it
                awaited.pop(c, None)
            elif since > self._told_at and self._tell_if_long(c, since, now, after):
                self._told_at = now
                return

    def _tell_if_long(self, c: Any, since: float, now: float, after: float) -> bool:
        if c.done() or c in self._told or now - since < after:
            return False
        self._told.append(c)
        threading.Thread(target=self._tell, args=(c, now - since),
                         name="regency-hang-notice", daemon=True).start()
        return True

    def _tell(self, c: Any, waited: float) -> None:
        try:
            text = notice(c.label, waited)
        except Exception:  # noqa: BLE001 - a notice must never hurt the program
            log.debug("regency: no hang notice", exc_info=True)
            return
        if not c.done():  # answered while the stacks came: nothing to tell
            _output.interject(text)


def notice(label: Any, waited: float) -> str:
    """The words of a notice: what is waited for (a call's collector, or a text), and the
    grouped stacks of the procs that owe an answer."""
    pending = getattr(label, "pending_text", None)
    what = pending() if callable(pending) else str(label)
    return (f"regency: the program has waited {waited:.0f} s for {what}, which has not "
            f"answered; it goes on waiting (a notice, not an error: `get(timeout=...)` "
            f"bounds a wait, `hang_notice_after` sets when this comes)"
            f"{where_stuck(label, waited)}")


def start(rt: Runtime) -> None:
    """Sample the controller's main-thread waits (none while ``hang_notice_after`` is 0)."""
    rt.loop.call_soon_threadsafe(HangNotice(rt).tick)
