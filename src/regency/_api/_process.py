"""The runtime of this process, as every layer of the API reaches it: ``runtime()``.

In a proc or a worker, the runtime is made before any user code runs. In the controller the
first regency call starts it, from whichever layer that call enters (an adverb, a port,
``context()``). Starting it installs the handlers of the top layers, which a lower layer must
not import: the top layer (``_bootstrap``) hands its starter to ``set_starter`` when it is
imported, and ``regency`` imports it before anything can run. So imports flow one way, and
no function imports upward (see ``docs/adr/0015-api-layers-and-supervision-judge.md``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .._runtime import _current
from .._runtime._runtime import Runtime

__all__ = ["lock", "runtime", "set_starter"]

_lock = threading.Lock()
_starter: Callable[[], Runtime] | None = None


def set_starter(start: Callable[[], Runtime]) -> None:
    """Make ``start()`` how a controller's runtime is started on first use (``_bootstrap``)."""
    global _starter
    _starter = start


def runtime() -> Runtime:
    """The runtime of this process, starting the controller runtime if needed."""
    rt = _current.get()
    if rt is not None:
        return rt
    with _lock:
        rt = _current.get()
        if rt is None:
            if _starter is None:
                raise RuntimeError("regency's runtime cannot start: import regency first")
            rt = _starter()
        return rt


def lock() -> threading.Lock:
    """The lock under which runtimes of this process start and stop (``_bootstrap``)."""
    return _lock
