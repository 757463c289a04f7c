"""The compiled hot path: which modules may run as mypyc-compiled code, and whether they do.

regency is pure Python. The modules every message passes through (:data:`HOT`) can also be
compiled with mypyc (``make accelerate``, or a wheel built with ``REGENCY_COMPILE=1``): the
same source, turned into C, costs about a third less controller CPU per round trip (ADR
0031). The compiled files sit beside their sources, and Python imports a compiled module in
preference to its ``.py``.

Two things could make that wrong, and :func:`install` (run first thing by
``regency/__init__``, before any of these modules is imported) guards against both:

* *A stale build.* After an edit to a hot module, its compiled copy would silently run the
  old code. The build records a hash of each source (:data:`MANIFEST`); when any source no
  longer matches, every hot module is imported from its ``.py`` (all or none: compiled
  modules call each other directly, so a mix would have two copies of a class), with one
  warning that says how to rebuild.
* *Wanting the pure path* (to debug, or to test it): ``REGENCY_PURE_PYTHON=1`` imports
  every hot module from its ``.py``.

This module imports nothing of regency (``setup.py`` and ``tools/accelerate.py`` read
:data:`HOT` from it too).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["HOT", "MANIFEST", "compiled_files", "compiled_modules", "install", "source_hashes"]

#: The modules compiled by ``make accelerate``: the path of a call and its reply (a module
#: is listed only when the whole suite passes with it compiled; see ADR 0031).
HOT: tuple[str, ...] = (
    "regency._wire._frames",
    "regency._wire._headers",
    "regency._wire._envelope",
    "regency._transport._poller",
    "regency._transport._borrowing",
    "regency._transport._reader",
    "regency._transport._writer",
    "regency._runtime._completion",
    "regency._runtime._pickling",
    "regency._runtime._borrow",
    "regency._runtime._cell",
    "regency._runtime._lines",
    "regency._runtime._ports",
    "regency._api._endpoint",
    "regency._api._replies",
)

#: Written by the build beside this file: ``{"sources": {module: sha256 of its .py}}``.
MANIFEST = "_accel_manifest.json"
PURE_ENV = "REGENCY_PURE_PYTHON"

_ROOT = Path(__file__).resolve().parent.parent  # the directory that holds ``regency/``


def source_path(module: str, root: Path = _ROOT) -> Path:
    """The ``.py`` file of ``module`` under ``root``."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def source_hashes(modules: Sequence[str] = HOT, root: Path = _ROOT) -> dict[str, str]:
    """The sha256 of each module's source (what the build records and the import checks)."""
    return {m: hashlib.sha256(source_path(m, root).read_bytes()).hexdigest() for m in modules}


def compiled_files(module: str, root: Path = _ROOT) -> list[Path]:
    """The compiled files of ``module`` beside its source under ``root`` (none: pure)."""
    src = source_path(module, root)
    return [*src.parent.glob(src.stem + ".*.so"), *src.parent.glob(src.stem + ".*.pyd")]


def stale_reason(root: Path = _ROOT) -> str | None:
    """Why the compiled modules must not be used, or None when they may (or there are none)."""
    if not any(compiled_files(m, root) for m in HOT):
        return None
    manifest = root / "regency" / MANIFEST
    try:
        recorded = json.loads(manifest.read_text())["sources"]
    except FileNotFoundError:
        return None  # an installed wheel: built from exactly these sources
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"its manifest {manifest} is unreadable ({exc})"
    try:
        current = source_hashes(HOT, root)
    except OSError as exc:
        return f"a source is unreadable ({exc})"
    changed = sorted(m for m in HOT if recorded.get(m) != current[m])
    if changed:
        return f"{', '.join(changed)} changed since the build"
    return None


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Imports the hot modules from their ``.py`` files, past any compiled copy."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names or not path:
            return None
        leaf = fullname.rpartition(".")[2]
        for folder in path:
            source = os.path.join(folder, leaf + ".py")
            if os.path.exists(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def install() -> None:
    """Make the hot modules import from source when asked to, or when their build is stale."""
    if any(isinstance(f, _SourceFirst) for f in sys.meta_path):
        return
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        sys.meta_path.insert(0, _SourceFirst(frozenset(HOT)))
        return
    reason = stale_reason()
    if reason is not None:
        sys.meta_path.insert(0, _SourceFirst(frozenset(HOT)))
        warnings.warn(f"regency: not using the compiled hot path: {reason}; rebuild it with "
                      "`make accelerate` (or remove it with `make pure`)",
                      RuntimeWarning, stacklevel=2)


def compiled_modules() -> list[str]:
    """The hot modules that run compiled in this process (imported ones only)."""
    out = []
    for name in HOT:
        module = sys.modules.get(name)
        if module is not None and isinstance(getattr(module, "__loader__", None),
                                             importlib.machinery.ExtensionFileLoader):
            out.append(name)
    return out
