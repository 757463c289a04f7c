"""Fail fast: one report, then the controller exits non-zero, whatever the main thread does.

A flag checked by the next ``.get()`` is not enough: the main thread may sit in
``time.sleep`` or a blocking call. We deliver a real SIGINT to the main thread; the handler
installed at bootstrap turns it into ``SystemExit(code)`` when a fail-fast is pending (and
behaves as before otherwise, so Ctrl-C still works). A timer thread is the hard deadline.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from .. import config
from .._runtime import _output
from .._runtime._borrow import defer_interrupts

_exit_code: int | None = None
_installed = False
_more = 0  # unhandled failures reported after the fail-fast one (summed up, not shown whole)
_ALSO_SHOWN = 3  # of those, how many get a line of their own
_exit_hook = False  # regency's exit hook is stopping the meshes: the script has ended
INTERRUPTED = 128 + int(signal.SIGINT)  # 130: what a shell reports after Ctrl-C
_reporting = False  # the main thread is printing an uncaught exception: do not interrupt it
_REDELIVER_S = 0.2
#: Set by the handler once it has seen a pending fail-fast: the SIGINT was delivered.
_heard = threading.Event()
#: The completion the main thread is blocked on in ``Future.get`` (set and cleared there).
waiting: Any = None
#: The completions the main thread's asyncio code awaits, and since when (``Future.__await__``
#: adds and removes them; the hang notice reads them).
awaited: dict[Any, float] = {}


def pending_exit_code() -> int | None:
    """The exit code of a pending fail-fast, if one was triggered."""
    return _exit_code


def install_handler() -> None:
    """Route SIGINT through our handler (main thread only; idempotent)."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(sig: int, frame: FrameType | None) -> Any:
        if defer_interrupts.depth:
            defer_interrupts.pending = sig  # raised again when the section ends
            return None
        if _exit_hook and _exit_code is None and not _script_running(frame):
            # Ctrl-C again while the meshes stop (a fail-fast's own SIGINTs come only with
            # an exit code): do not wait for them; their procs end with this process
            _output.interject("regency: interrupted again: exiting now (the procs end with "
                              "this process)")
            os._exit(INTERRUPTED)
        if _exit_code is not None:
            _heard.set()
            if _reporting or not _script_running(frame):
                return None  # already on the way out; the exit code is applied at exit
            c = waiting
            if c is not None and c.done() and c.exception() is not None:
                # The blocked get() is about to raise the failure itself: let it, so that
                # its traceback is printed; interrupt again later if the script goes on.
                _interrupt_later()
                return None
            raise SystemExit(_exit_code)
        if callable(previous):
            return previous(sig, frame)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    previous_hook = sys.excepthook

    def excepthook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        global _reporting
        _reporting = True
        if issubclass(kind, KeyboardInterrupt):
            sys.stderr.write("regency: interrupted (Ctrl-C): stopping the meshes and exiting\n")
            return
        previous_hook(kind, exc, tb)

    sys.excepthook = excepthook
    _installed = True




def exit_hook_started() -> None:
    """regency's exit hook has begun stopping the meshes: a Ctrl-C now exits at once."""
    global _exit_hook
    _exit_hook = True


def reporting() -> bool:
    """Whether the main thread is printing an uncaught exception (do not interrupt it)."""
    return _reporting


def _script_running(frame: FrameType | None) -> bool:
    """Whether the main thread is still running the user's script (not an excepthook or an
    atexit handler after it ended, where raising would only garble the exit)."""
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            return True
        frame = frame.f_back
    return False


def _interrupt_later() -> None:
    main = threading.main_thread()

    def again() -> None:
        if main.is_alive() and main.ident is not None:
            signal.pthread_kill(main.ident, signal.SIGINT)

    timer = threading.Timer(_REDELIVER_S, again)
    timer.daemon = True
    timer.start()


def fail_fast(report: str, code: int = 1) -> None:
    """Print ``report`` once and make the program exit with ``code`` promptly; a report
    that comes while the program exits is summed up in one line (the other ranks of a
    broadcast that failed on all of them, say)."""
    global _exit_code, _more
    if _exit_code is not None:
        if _more < _ALSO_SHOWN:
            _output.interject(f"regency: meanwhile, also unhandled: {summary(report)}")
        _more += 1
        return
    _exit_code = code
    _output.interject(report)  # whole, after the script's open line
    deadline = float(config.get("fail_fast_exit_deadline"))
    timer = threading.Timer(deadline, os._exit, (code,))
    timer.daemon = True
    timer.start()
    main = threading.main_thread()
    if not main.is_alive():
        return  # interpreter shutting down: the atexit hook reads the code
    if _installed and main.ident is not None:
        signal.pthread_kill(main.ident, signal.SIGINT)
        _redeliver_until_heard(main)
    else:
        _thread.interrupt_main()


def summary(report: str) -> str:
    """One line of a failure report: which mesh and ranks failed, and the cause."""
    lines = [ln.strip() for ln in report.splitlines() if ln.strip()]
    what = next((ln for ln in lines if ln.startswith("mesh '")), "")
    cause = next((ln.removeprefix("cause:").strip() for ln in lines
                  if ln.startswith("cause:")), "")
    if what and cause:
        return f"{what}: {cause}"
    return what or cause or (lines[-1] if lines else report)


def say_how_many_more() -> None:
    """At exit: how many more unhandled failures came than were summed up (none: quiet)."""
    left = _more - _ALSO_SHOWN
    if left > 0:
        _output.interject(f"regency: and {left} more unhandled failure(s) while exiting")


def _redeliver_until_heard(main: threading.Thread) -> None:
    """Send the SIGINT again every ``_REDELIVER_S`` until the handler has seen it.

    A signal that lands after the interpreter's last check for pending handlers and before
    the main thread enters a blocking system call (an event loop's ``epoll_wait``, say) is
    handled only when that call returns: the program would sit until the hard deadline.
    """
    def again() -> None:
        while not _heard.wait(_REDELIVER_S):
            if _exit_code is None or not main.is_alive() or main.ident is None:
                return  # reset (tests, notebooks), or the program is gone
            signal.pthread_kill(main.ident, signal.SIGINT)

    threading.Thread(target=again, name="regency-fail-fast", daemon=True).start()


def reset() -> None:
    """Forget a pending fail-fast (tests, notebooks)."""
    global _exit_code, _more
    _exit_code = None
    _more = 0
    _heard.clear()
