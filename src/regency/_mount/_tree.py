"""The metadata of a mounted directory: what the controller lists and every host serves.

A tree is ``{"/rel/path": (mode, size, mtime_ns)}`` with ``"/"`` for the root; it travels
once, when the mount opens, and the hosts answer ``getattr``/``readdir`` from it alone.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

Entry = tuple[int, int, int]  # st_mode, st_size, st_mtime_ns
Tree = dict[str, Entry]

BLOCK = 4 << 20  # the unit a host fetches and the controller multicasts


def list_tree(root: Path) -> Tree:
    """The directories and regular files under ``root`` (symlinks followed only if they
    stay inside it; other kinds left out)."""
    root = root.resolve()
    tree: Tree = {"/": _entry(os.stat(root))}
    for parent, dirs, files in os.walk(root):
        rel = "/" + os.path.relpath(parent, root) if parent != str(root) else ""
        for name in dirs + files:
            path = os.path.join(parent, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            real = os.path.realpath(path)
            if real != str(root) and not real.startswith(str(root) + os.sep):
                continue
            if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
                tree[f"{rel}/{name}"] = _entry(st)
    return tree


def _entry(st: os.stat_result) -> Entry:
    return (st.st_mode & ~0o222, st.st_size, st.st_mtime_ns)  # read-only on the hosts


def children(tree: Tree) -> dict[str, list[str]]:
    """``{directory: [names in it]}``."""
    out: dict[str, list[str]] = {p: [] for p, e in tree.items() if stat.S_ISDIR(e[0])}
    for path in tree:
        if path == "/":
            continue
        parent, name = path.rsplit("/", 1)
        out.setdefault(parent or "/", []).append(name)
    return out


def blocks_of(offset: int, size: int, length: int) -> range:
    """The block numbers a read of ``size`` bytes at ``offset`` of a ``length``-byte file
    touches."""
    end = min(offset + size, length)
    if end <= offset:
        return range(0)
    return range(offset // BLOCK, (end - 1) // BLOCK + 1)
