"""Monarch's three ways of being a worker: forever, until shutdown, or in the background.

* :func:`run_worker_loop_forever` serves controllers one after another; when a controller
  shuts the host down, the process exits (Monarch: "until host shutdown terminates this
  process");
* :func:`run_worker_loop_until_shutdown` is the same but *returns* after that shutdown;
* :func:`start_worker_loop_forever` starts the worker on a thread of this process and returns
  a Future that completes when it stops. This process then *is* a host: it cannot also be a
  controller (regency runs one runtime per process).

The address forms and ``ca``/``private_key`` are those of ``attach_to_workers`` (see
``_worker_addr``); TLS comes from regency's configuration.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, NoReturn

from .._runtime import _current
from .._runtime._completion import Completion
from ._future import Future
from ._workers import run_worker_loop_forever as _serve

__all__ = ["run_worker_loop_forever", "run_worker_loop_until_shutdown",
           "start_worker_loop_forever"]


def run_worker_loop_until_shutdown(*, address: str = "tcp://0.0.0.0:26600",
                                   ca: str = "trust_all_connections",
                                   private_key: Any = None) -> None:
    """Serve controllers as a worker host at ``address``; return once one shuts it down.

    Example::

        REGENCY_SECRET=... python -c "from regency.actor import run_worker_loop_until_shutdown
        run_worker_loop_until_shutdown(address='tcp://gpu1:26600@tcp://0.0.0.0:26600')"
    """
    _serve(address, ca, private_key=private_key)


def run_worker_loop_forever(*, address: str = "tcp://0.0.0.0:26600",
                            ca: str = "trust_all_connections",
                            private_key: Any = None) -> NoReturn:
    """Serve controllers as a worker host at ``address`` until shut down, then exit.

    A controller that disconnects (or dies) releases the host for the next one; only a
    controller's ``shutdown()`` ends the process. Example::

        from regency.actor import run_worker_loop_forever
        run_worker_loop_forever(address="tcp://*:26600")     # REGENCY_SECRET in the env
    """
    sys.exit(_serve(address, ca, private_key=private_key))


def start_worker_loop_forever(*, address: str = "tcp://0.0.0.0:26600",
                              ca: str = "trust_all_connections",
                              private_key: Any = None) -> Future[None]:
    """Start serving as a worker host on a background thread; a Future of its end.

    ``get()`` on the Future blocks until the worker shuts down (or raises why it failed).

    Raises:
        RuntimeError: regency already runs in this process (as a controller or a worker).
    """
    if _current.get() is not None:
        raise RuntimeError("start_worker_loop_forever: regency already runs in this process; "
                           "a process is either a controller or a worker host. Start the "
                           "worker before any other regency call, or in its own process")
    done = Completion(label=f"the worker at {address}")
    started = threading.Event()

    def serve() -> None:
        try:
            started.set()
            code = _serve(address, ca, private_key=private_key)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the Future
            done.set_exception(exc)
        else:
            if code:
                done.set_exception(RuntimeError(f"the worker at {address} exited with {code}"))
            else:
                done.set_result(None)

    threading.Thread(target=serve, name="regency-worker", daemon=True).start()
    started.wait()
    return Future._from(done)
