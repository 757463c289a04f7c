"""What forwarded proc output the controller's terminal shows: ``ProcMesh.logging_option``.

Per proc mesh (by its name, the first word of each line's ``[label]``):

* ``stream_to_client=False`` shows nothing (the lines are still kept: the failure report's
  tail and the on-disk log, :mod:`._proclog`, have them).
* ``level``: stdout lines count as INFO (20), stderr lines as WARNING (30); lines below the
  level are not shown.
* ``aggregate_window_sec``: lines are held for the window, then lines that ranks printed
  alike (the same text once numbers are set aside) are shown once, as
  ``[16 similar lines] text`` with the first one's text, in order of first appearance; a
  line only one rank printed is shown as usual. Display only: nothing is dropped from the
  logs.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Options", "intercept", "set_options"]

_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


@dataclass
class Options:
    """The display options of one proc mesh."""

    stream: bool = True
    window: float | None = None
    level: int = logging.INFO


@dataclass
class _Window:
    """Lines held for one window: (kind, key) -> [count, first text]."""

    groups: dict[tuple[str, str], list[object]] = field(default_factory=dict)
    first_label: dict[tuple[str, str], str] = field(default_factory=dict)


_options: dict[str, Options] = {}
_windows: dict[str, _Window] = {}
_lock = threading.Lock()
_LEVELS = {"stdout": logging.INFO, "stderr": logging.WARNING}


def set_options(mesh: str, options: Options) -> None:
    """Set how the output of the proc mesh named ``mesh`` is shown."""
    with _lock:
        _options[mesh] = options


def intercept(label: str, kind: str, lines: list[str],
              write: Callable[[str, str, list[str]], None],
              later: Callable[[float, Callable[[], None]], None]) -> bool:
    """Apply the options of ``label``'s mesh. Returns True when the lines were dealt with
    here (hidden, or held for the window: ``later(delay, fn)`` schedules its flush, which
    writes through ``write(label, kind, lines)``); False to write them as usual."""
    mesh = label.split(" ", 1)[0]
    options = _options.get(mesh)
    if options is None:
        return False
    if not options.stream or _LEVELS.get(kind, logging.INFO) < options.level:
        return True
    if not options.window:
        return False
    with _lock:
        window = _windows.get(mesh)
        start = window is None
        if window is None:
            window = _windows[mesh] = _Window()
        for line in lines:
            key = (kind, _NUMBER.sub("#", line))
            group = window.groups.get(key)
            if group is None:
                window.groups[key] = [1, line]
                window.first_label[key] = label
            else:
                group[0] = int(str(group[0])) + 1
    if start:
        later(options.window, lambda: _flush(mesh, write))
    return True


def _flush(mesh: str, write: Callable[[str, str, list[str]], None]) -> None:
    with _lock:
        window = _windows.pop(mesh, None)
    if window is None:
        return
    for key, (count, text) in window.groups.items():
        kind = key[0]
        n = int(str(count))
        if n == 1:
            write(window.first_label[key], kind, [str(text)])
        else:
            write(f"{n} similar lines", kind, [str(text)])


def flush_all(write: Callable[[str, str, list[str]], None]) -> None:
    """Show every held window now (the program is ending)."""
    for mesh in list(_windows):
        _flush(mesh, write)
