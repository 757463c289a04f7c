"""Code sync: ``await host_mesh.sync_workspace(Workspace(dirs=[...]))``.

Theory of operation
-------------------
Every host gets a copy of the workspace's local directories under its workspace root
(``$REGENCY_WORKSPACE_DIR`` of the host's procs, default ``~/.regency/workspace``), each in
a subdirectory named by the workspace (``dirs=["src"]`` -> ``<root>/src``; or
``{local: remote_rel}``). Only what changed travels:

1. the controller lists its files with a content hash (BLAKE2b), rehashing only files whose
   size or mtime changed since this process last looked;
2. one proc per host (spawned for the sync, stopped after) lists the host's copy the same
   way, keeping its index in ``<root>/.regency-sync.json``;
3. the controller sends each host the files whose hash differs, in batches of about 8 MiB,
   as ordinary actor messages (the job's authenticated, optionally TLS, connections: no
   rsync, no extra port); each file is written to a temporary name and renamed into place;
   files the local side no longer has are deleted (as ``rsync --delete``).

With ``auto_reload=True`` the modules loaded from changed files are reloaded
(``importlib.reload``) in every proc this process spawned on those hosts.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._actor import Actor, endpoint

__all__ = ["Workspace", "WorkspaceActor", "sync_workspace"]

BATCH_BYTES = 8 << 20
INDEX = ".regency-sync.json"
Entry = tuple[int, int, str]  # size, mtime_ns, hash


@dataclass
class Workspace:
    """Local directories to copy to every host (Monarch's ``Workspace``).

    Args:
        dirs: local directories, each copied to ``<root>/<its name>``; or a mapping
            ``{local dir: path relative to the root}``.
        env: environment variables for the workspace (kept for Monarch compatibility; set
            them with the job or ``spawn_procs`` instead).
    """

    dirs: Sequence[str | os.PathLike[str]] | Mapping[str | os.PathLike[str], str] = field(
        default_factory=list)
    env: dict[str, str] | None = None

    def targets(self) -> dict[str, Path]:
        """``{remote relative dir: local dir}``, checked."""
        pairs = (self.dirs.items() if isinstance(self.dirs, Mapping)
                 else [(d, Path(d).resolve().name) for d in self.dirs])
        out: dict[str, Path] = {}
        for local, rel in pairs:
            path = Path(local).expanduser().resolve()
            if not path.is_dir():
                raise ValueError(f"Workspace: {local!r} is not a directory")
            rel = os.path.normpath(str(rel))
            if rel.startswith("..") or os.path.isabs(rel) or rel in ("", "."):
                raise ValueError(f"Workspace: the remote path {rel!r} of {local!r} must be a "
                                 "relative path inside the workspace")
            out[rel] = path
        return out


_hash_cache: dict[str, dict[str, Entry]] = {}  # local parent dir -> its listing's entries


def _digest(path: str) -> str:
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def listing(root: Path, rel: str, cache: dict[str, Entry]) -> dict[str, Entry]:
    """``{rel/path: (size, mtime_ns, hash)}`` of the regular files under ``root/rel``
    (``__pycache__`` left out); hashes are reused from ``cache`` (keyed by the same names)
    when size and mtime are unchanged."""
    out: dict[str, Entry] = {}
    base = os.path.join(str(root), rel)
    if not os.path.isdir(base):
        return out
    skip = len(str(root)) + 1
    stack = [base]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        stack.append(entry.path)
                    continue
                st = entry.stat(follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode):
                    continue
                key = entry.path[skip:]
                old = cache.get(key)
                if old is not None and old[0] == st.st_size and old[1] == st.st_mtime_ns:
                    out[key] = old
                else:
                    out[key] = (st.st_size, st.st_mtime_ns, _digest(entry.path))
    return out


class WorkspaceActor(Actor):
    """The host side of a sync: lists, writes and deletes files under the workspace root."""

    def __init__(self) -> None:
        root = os.environ.get("REGENCY_WORKSPACE_DIR") or "~/.regency/workspace"
        self.root = Path(root).expanduser()
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.index: dict[str, Entry] = {
                k: tuple(v) for k, v in json.loads((self.root / INDEX).read_text()).items()}
        except (OSError, ValueError):
            self.index = {}

    @endpoint
    def manifest(self, rels: list[str]) -> dict[str, str]:
        """``{path: hash}`` of the files under the given subdirectories of the root."""
        now: dict[str, Entry] = {}
        for rel in rels:
            now.update(listing(self.root, rel, self.index))
        self.index = now
        return {k: v[2] for k, v in now.items()}

    @endpoint
    def write(self, files: list[tuple[str, int, bytes]]) -> int:
        """Write ``(path, mode, content)`` files atomically; how many."""
        for rel, mode, data in files:
            target = self._inside(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.regency-tmp")
            with open(tmp, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode & 0o7777)
            os.replace(tmp, target)
            st = target.stat()
            self.index[rel] = (st.st_size, st.st_mtime_ns,
                               hashlib.blake2b(data, digest_size=20).hexdigest())
        return len(files)

    @endpoint
    def finish(self, deleted: list[str]) -> str:
        """Delete files the controller no longer has, save the index; the root."""
        for rel in deleted:
            self._inside(rel).unlink(missing_ok=True)
            self.index.pop(rel, None)
        tmp = self.root / f".{INDEX}.tmp"
        tmp.write_text(json.dumps(self.index))
        os.replace(tmp, self.root / INDEX)
        return str(self.root)

    def _inside(self, rel: str) -> Path:
        target = (self.root / rel).resolve()
        if self.root.resolve() not in target.parents:
            raise ValueError(f"{rel!r} is outside the workspace {self.root}")
        return target


class Reloader(Actor):
    """Reloads the modules of this proc whose files changed."""

    @endpoint
    def reload(self, names: list[str]) -> list[str]:
        """Reload modules whose file ends with one of ``names``; the modules reloaded."""
        done = []
        for mod in list(sys.modules.values()):
            path = getattr(mod, "__file__", None)
            if path and any(path.endswith(os.sep + n) for n in names):
                importlib.reload(mod)
                done.append(mod.__name__)
        return done


async def sync_workspace(hosts: Any, workspace: Workspace, auto_reload: bool = False,
                         reload_procs: Sequence[Any] = ()) -> dict[str, Any]:
    """Bring every host's copy of ``workspace`` up to date (see the module docstring).

    Returns ``{"files": sent per host, "bytes": sent per host, "deleted": per host,
    "changed": sorted paths changed anywhere, "reloaded": modules reloaded}``.
    """
    targets = workspace.targets()
    procs = hosts.spawn_procs(name="sync")
    try:
        actors = procs.spawn("workspace", WorkspaceActor)
        asked = actors.manifest.call(sorted(targets))  # the hosts list while we do
        local, paths = _local_listing(targets)
        report = await _update(actors, await asked, local, paths)
    finally:
        await procs.stop()
    changed = sorted(report["changed"])
    report["changed"] = changed
    report["reloaded"] = []
    if auto_reload and changed:
        for pm in reload_procs:
            got = await pm.spawn("reload", Reloader).reload.call(changed)
            report["reloaded"] += sorted({m for _, mods in got.items() for m in mods})
    return report


def _local_listing(targets: dict[str, Path]) -> tuple[dict[str, Entry], dict[str, str]]:
    """The workspace's files as the hosts will name them, and where each is here."""
    local: dict[str, Entry] = {}
    paths: dict[str, str] = {}
    for rel, path in targets.items():
        cache = _hash_cache.setdefault(str(path.parent), {})
        entries = listing(path.parent, path.name, cache)
        cache.update(entries)
        cut = len(path.name)
        for key, entry in entries.items():
            name = rel + key[cut:]  # key is "<local dir name>/<path inside>"
            local[name] = entry
            paths[name] = os.path.join(path.parent, key)
    return local, paths


async def _update(actors: Any, remote: Any, local: dict[str, Entry],
                  paths: dict[str, str]) -> dict[str, Any]:
    """Send each host what it lacks and delete what it should not have; the report."""
    report: dict[str, Any] = {"files": [], "bytes": [], "deleted": [], "changed": set()}
    plans = []
    for point, have in remote.items():
        send = sorted(n for n, e in local.items() if have.get(n) != e[2])
        gone = sorted(set(have) - set(local))
        plans.append((dict(point), send, gone))
    if all(p[1] == plans[0][1] for p in plans):  # the usual case: one multicast for all
        nbytes = await _send(actors, plans[0][1], paths)
        sent = [nbytes] * len(plans)
    else:
        sent = [await _send(actors.slice(**point), send, paths) for point, send, _ in plans]
    for (point, send, gone), nbytes in zip(plans, sent):
        await actors.slice(**point).finish.call(gone)
        report["files"].append(len(send))
        report["bytes"].append(nbytes)
        report["deleted"].append(len(gone))
        report["changed"].update(send, gone)
    return report


async def _send(mesh: Any, names: list[str], paths: dict[str, str]) -> int:
    """Send the files ``names`` to every member of ``mesh``, in batches; bytes sent."""
    batch: list[tuple[str, int, bytes]] = []
    size = total = 0
    for name in names:
        path = paths[name]
        data = Path(path).read_bytes()
        batch.append((name, os.stat(path).st_mode, data))
        size += len(data)
        total += len(data)
        if size >= BATCH_BYTES:
            await mesh.write.call(batch)
            batch, size = [], 0
    if batch:
        await mesh.write.call(batch)
    return total
