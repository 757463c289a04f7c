"""What forwarded proc output the controller's terminal shows: ``ProcMesh.logging_option``.

Per proc mesh (by its name, the first word of each line's ``[label]``):

* ``stream_to_client=False`` shows nothing (the lines are still kept: the failure report's
  tail and the on-disk log, :mod:`._proclog`, have them).
* ``level``: stdout lines count as INFO (20), stderr lines as WARNING (30); lines below the
  level are not shown.
* ``aggregate_window_sec``: lines are held for the window, then lines that ranks printed
  alike (the same text once numbers are set aside) are shown once, as
  ``[16 similar lines from trainers {'gpus': 0-15}] text`` with the first one's text, in
  order of first appearance (the procs that printed them as ranges along one dimension,
  else counted; one label when a single proc printed them all); a line printed once is
  shown as usual. Display only: nothing is dropped from the logs.
"""

from __future__ import annotations

import ast
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Options", "intercept", "ranges", "set_options", "who"]

_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


@dataclass
class Options:
    """The display options of one proc mesh."""

    stream: bool = True
    window: float | None = None
    level: int = logging.INFO


@dataclass
class _Window:
    """Lines held for one window: (kind, key) -> [count, first text], and the labels (procs)
    that printed them, in order of first appearance."""

    groups: dict[tuple[str, str], list[object]] = field(default_factory=dict)
    labels: dict[tuple[str, str], dict[str, None]] = field(default_factory=dict)


_options: dict[str, Options] = {}
_windows: dict[str, _Window] = {}
_lock = threading.Lock()
_LEVELS = {"stdout": logging.INFO, "stderr": logging.WARNING}


#: ``write(label, kind, lines, group)``: ``group``, for alike lines shown once, is how many
#: there were and the labels of the procs that printed them (None for a proc's own lines).
Group = tuple[int, list[str]]
Write = Callable[[str, str, list[str], "Group | None"], None]

_LABEL = re.compile(r"(?P<mesh>.*?) (?P<coords>\{[^{}]*\})(?P<note>.*)", re.S)


def split_label(label: str) -> tuple[str, Any, str]:
    """A proc's label, ``"<mesh name> {coords}[ (respawned)]"``, as ``(mesh, coords, note)``:
    the coordinates as a dict; a mesh name may hold spaces. A label without coordinates
    is its first word and None."""
    found = _LABEL.fullmatch(label)
    if found is not None:
        try:
            coords = ast.literal_eval(found.group("coords"))
        except (ValueError, SyntaxError):
            coords = None
        if isinstance(coords, dict):
            return found.group("mesh"), coords, found.group("note").strip()
    return label.split(" ", 1)[0], None, ""


def set_options(mesh: str, options: Options) -> None:
    """Set how the output of the proc mesh named ``mesh`` is shown."""
    with _lock:
        _options[mesh] = options


def intercept(label: str, kind: str, lines: list[str],
              write: Write,
              later: Callable[[float, Callable[[], None]], None]) -> bool:
    """Apply the options of ``label``'s mesh. Returns True when the lines were dealt with
    here (hidden, or held for the window: ``later(delay, fn)`` schedules its flush, which
    writes through ``write``); False to write them as usual."""
    mesh = split_label(label)[0]
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
                window.labels[key] = {label: None}
            else:
                group[0] = int(str(group[0])) + 1
                window.labels[key][label] = None
    if start:
        later(options.window, lambda: _flush(mesh, write))
    return True


def _flush(mesh: str, write: Write) -> None:
    with _lock:
        window = _windows.pop(mesh, None)
    if window is None:
        return
    for key, (count, text) in window.groups.items():
        kind = key[0]
        n = int(str(count))
        labels = list(window.labels[key])
        if n == 1:
            write(labels[0], kind, [str(text)], None)
        else:
            write(f"{n} similar lines from {who(labels)}", kind, [str(text)], (n, labels))


def who(labels: list[str]) -> str:
    """The procs that printed alike lines, in few words: one label as it is (``talkers
    {'procs': 3}``: one proc printed them all); procs along one dimension as ranges
    (``talkers {'procs': 0-5,7}``); else a count (``talkers, 12 procs``)."""
    if len(labels) == 1:
        return labels[0]
    meshes: dict[str, list[tuple[str, Any]]] = {}
    for label in labels:
        mesh, point, _ = split_label(label)
        meshes.setdefault(mesh, []).append((label, point))
    return "; ".join(_procs_text(mesh, found) for mesh, found in meshes.items())


def _procs_text(mesh: str, found: list[tuple[str, Any]]) -> str:
    if len(found) == 1:
        return found[0][0]
    points = [p for _, p in found]
    dims = {tuple(p) for p in points if isinstance(p, dict)}
    if len(dims) == 1 and all(isinstance(p, dict) for p in points):
        keys = next(iter(dims))
        if len(keys) == 1 and all(isinstance(p[keys[0]], int) for p in points):
            return f"{mesh} {{'{keys[0]}': {ranges(p[keys[0]] for p in points)}}}"
    return f"{mesh}, {len(points)} procs"


def ranges(values: Iterable[int]) -> str:
    """``0-5,7``: the values, sorted, as runs (ranks, coordinates)."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def as_json(label: str, kind: str, text: str, now: float, group: Group | None = None) -> str:
    """One forwarded line as a JSON object (``output_json``): ``mesh`` and ``coords`` of the
    proc that printed it (and ``respawned``: true for a respawned rank's proc), or, for
    alike lines shown once, ``count`` and ``procs`` (each ``{mesh, coords}``); then
    ``stream`` ("stdout"/"stderr"), ``line`` and ``ts`` (seconds since the epoch)."""
    record: dict[str, Any]
    if group is not None:
        record = {"count": group[0], "procs": [_who_json(m) for m in group[1]]}
    else:
        record = _who_json(label)
    record.update(stream=kind, line=text, ts=round(now, 6))
    return json.dumps(record, ensure_ascii=False)


def _who_json(label: str) -> dict[str, Any]:
    mesh, coords, note = split_label(label)
    out: dict[str, Any] = {"mesh": mesh, "coords": coords}
    if "respawned" in note:
        out["respawned"] = True
    return out


def flush_all(write: Write) -> None:
    """Show every held window now (the program is ending)."""
    for mesh in list(_windows):
        _flush(mesh, write)
