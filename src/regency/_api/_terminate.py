"""SIGTERM: stop the way Ctrl-C does, within a bounded grace period.

SLURM and Kubernetes stop a job with SIGTERM (then SIGKILL after their own grace period).
Python's default for SIGTERM ends the process at once: no ``finally``, no ``atexit``, no
``__cleanup__``. So where regency runs the process's main thread it routes SIGTERM:

* **controller** (when its runtime starts): ``SystemExit(143)`` in the main thread, so the
  script's ``finally`` blocks and ``atexit`` hooks run, and regency's own exit hook stops the
  meshes (their actors' ``__cleanup__`` runs). The process exits with 143 (128 + SIGTERM).
* **proc**: its actors' ``__cleanup__`` runs, then the proc ends *by* SIGTERM, so its owner's
  supervision names the signal.
* **worker** (``run_worker_loop_forever``): its procs are stopped (their ``__cleanup__``
  runs), then it exits 0; Ctrl-C (SIGINT) does the same and exits 130, and a second Ctrl-C
  exits at once.

Every path is bounded: ``sigterm_grace`` seconds after the first SIGTERM a timer ends the
process whatever it is doing (procs left then die with their fork server). A second SIGTERM
changes nothing. A handler the program installed itself (or SIG_IGN) is left alone: regency
only replaces the default one, and only from the main thread.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from .. import config
from .._runtime import _output, _whole_lines
from . import _failfast

__all__ = ["EXIT_CODE", "install_in_controller", "install_in_proc", "install_in_worker"]

EXIT_CODE = 128 + int(signal.SIGTERM)  # 143: what a shell reports for a SIGTERMed process
INTERRUPTED = _failfast.INTERRUPTED  # 130: for Ctrl-C
_state = {"received": False, "exiting": False}


def received() -> bool:
    """Whether this process got SIGTERM (and is on its way out)."""
    return _state["received"]


def exiting() -> None:
    """The controller's exit hook has begun: a SIGTERM from now on only bounds it in time."""
    _state["exiting"] = True


def _may_install() -> bool:
    if threading.current_thread() is not threading.main_thread():
        return False
    return signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def _grace() -> float:
    return float(config.get("sigterm_grace"))




def _first() -> bool:
    """Record a SIGTERM; False when one came before (nothing more to do)."""
    if _state["received"]:
        return False
    _state["received"] = True
    return True


def _deadline(action: Callable[[], None]) -> None:
    """Run ``action`` ``sigterm_grace`` seconds from now, on a daemon timer."""
    timer = threading.Timer(_grace(), action)
    timer.daemon = True
    timer.start()


def _exit_now() -> None:
    _output.interject(f"regency: SIGTERM grace period ({_grace():g} s) is over: exiting now")
    os._exit(EXIT_CODE)


def die_by_sigterm() -> None:
    """End this process by SIGTERM itself (its parent reads 'killed by signal SIGTERM')."""
    _whole_lines.flush_all()  # every thread's unfinished line too
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    os._exit(EXIT_CODE)  # not reached unless SIGTERM is blocked in this thread


# -- controller --------------------------------------------------------------------------------
def install_in_controller() -> bool:
    """Route SIGTERM like Ctrl-C in the controller (main thread; default handler only)."""
    if not _may_install():
        return False
    signal.signal(signal.SIGTERM, _on_controller_sigterm)
    return True


def _on_controller_sigterm(sig: int, frame: FrameType | None) -> Any:
    if _first():
        _output.interject(f"regency: terminated (SIGTERM): stopping the meshes and exiting "
             f"(within {_grace():g} s)")
        _deadline(_exit_now)
    if _failfast.defer_interrupts.depth:
        _failfast.defer_interrupts.pending = sig  # raised again when the section ends
        return None
    if _state["exiting"] or _failfast.reporting():
        return None  # already on the way out; the timer bounds it
    raise SystemExit(EXIT_CODE)


# -- proc --------------------------------------------------------------------------------------
def install_in_proc(schedule: Callable[[], object]) -> bool:
    """On SIGTERM, call ``schedule`` (thread-safe: it must only hand work to the loop)."""
    if not _may_install():
        return False

    def handler(sig: int, frame: FrameType | None) -> None:
        if not _first():
            return
        _output.interject(f"regency: this proc received SIGTERM: running __cleanup__ (within "
             f"{_grace():g} s), then ending")
        _deadline(die_by_sigterm)
        schedule()

    signal.signal(signal.SIGTERM, handler)
    os.register_at_fork(before=_hold_sigterm, after_in_parent=_release_sigterm,
                        after_in_child=lambda: _not_in_a_fork(handler))
    return True


_forking = threading.local()  # the signal mask of a thread that forks, while it forks


def _hold_sigterm() -> None:
    """Before a fork: block SIGTERM in the forking thread, so that one sent to the child
    before it has its own disposition waits for it (the child inherits the mask)."""
    _forking.mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _release_sigterm() -> None:
    """After a fork, in the parent: the thread's mask as it was."""
    mask = getattr(_forking, "mask", None)
    if mask is not None:
        _forking.mask = None
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _not_in_a_fork(handler: Callable[..., object]) -> None:
    """A child the proc forked (``multiprocessing``, say) is no proc: a SIGTERM ends it.

    A SIGTERM sent to it before this ran waited, blocked (``_hold_sigterm``): caught by
    the proc's handler, inherited, Python would have dropped it once the handler was
    reset (its C handler only notes a signal, for a Python handler that is gone by then),
    and the child lived on; a ``multiprocessing`` join of it then held the proc's exit
    until its stop timed out (13 s, under load)."""
    if signal.getsignal(signal.SIGTERM) is handler:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _release_sigterm()  # a SIGTERM that waited ends it now


# -- worker ------------------------------------------------------------------------------------
def install_in_worker(schedule: Callable[[int], object]) -> bool:
    """On SIGTERM, and on Ctrl-C (SIGINT) where Python's own handler is in place, call
    ``schedule(signal)`` (hands the worker's stop to its loop). A second Ctrl-C exits at
    once (what the procs left then die with their fork server)."""
    if not _may_install():
        return False

    def handler(sig: int, frame: FrameType | None) -> None:
        if not _first():
            if sig == signal.SIGINT:
                _output.interject("regency worker: interrupted again: exiting now")
                os._exit(INTERRUPTED)
            return
        _deadline(_exit_now)
        schedule(sig)

    signal.signal(signal.SIGTERM, handler)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, handler)
    return True
