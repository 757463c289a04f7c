"""The controller's script: where code carried by value from ``__main__`` comes from.

cloudpickle carries the classes and functions of the controller's ``__main__`` by value and
names their code ``<dynamic-code>``; tracebacks and stack dumps put the script's path and
lines back. In the controller the script is its own ``__main__``; a proc's ``__main__`` is
the fork server (or the bootstrap), so each proc is told the controller's script in its
spawn spec and passes it on to the procs it spawns.
"""

from __future__ import annotations

import os
import sys

__all__ = ["script", "set_script"]

_given: str | None = None  # a proc's: the controller's script ("" where it has none)


def set_script(path: str) -> None:
    """In a proc: the controller's script (``""``: none, e.g. a notebook)."""
    global _given
    _given = path


def script() -> str | None:
    """The path of the controller's script, or None where there is none."""
    if _given is not None:
        return _given or None
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.abspath(path) if isinstance(path, str) else None
