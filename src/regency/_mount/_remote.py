"""``remotemount(host_mesh, src, mntpoint)``: a local directory, read-only, on every host.

Theory of operation
-------------------
* The controller runs a :class:`MountSource` actor in its own process (``this_proc()``). It
  lists the directory once; the listing travels to the hosts with the mount, so ``stat`` and
  ``ls`` never reach the controller. ``refresh()`` lists it again and casts the new listing
  with the changed paths; hosts drop those files' blocks (fetched again when read).
* Each host gets one proc holding a :class:`MountHost` actor, which mounts a FUSE file system
  (``mfusepy``) at the mount point, backed by a per-host block cache (4 MiB blocks).
* A read of a block the host lacks asks the source for it, once per host however many procs
  read. The source reads each block from disk once and *casts* it to every host's
  ``MountHost`` (``deliver``). The hosts' actor mesh is spawned with a relay fan-out of
  ``fanout`` (default 1: a chain, as Monarch's pipelined broadcast), so the controller writes
  each block ``min(fanout, hosts)`` times and the hosts relay it on; a host that asks for a
  block already on its way is answered by that cast. Bytes the controller sends for one file
  read on N hosts: about ``fanout * size``, not ``N * size``.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Any

from .. import config
from .._api._actor import Actor, endpoint
from .._api._context import current_rank
from .._api._proc_mesh import this_proc
from ._fs import BlockCache, FuseMount, cache_operations
from ._tree import BLOCK, Tree, list_tree

__all__ = ["MountHandler", "MountHost", "MountSource", "remotemount"]


class MountSource(Actor):
    """The controller's side: lists the directory and multicasts blocks to the hosts."""

    def __init__(self, root: str) -> None:
        self.root = Path(root).resolve()
        self.hosts: Any = None
        self.tree: Tree = {}
        self.sent: set[tuple[str, int]] = set()
        self.read_bytes = 0
        self.blocks = 0

    @endpoint
    def listing(self) -> Tree:
        """The tree of the directory, as the hosts serve it."""
        self.tree = list_tree(self.root)
        return self.tree

    @endpoint
    def attach(self, hosts: Any) -> None:
        """The hosts' ``MountHost`` mesh, to cast blocks to."""
        self.hosts = hosts

    @endpoint
    def want(self, path: str, block: int) -> None:
        """A host lacks ``block`` of ``path``: read it once and cast it to every host."""
        key = (path, block)
        if key in self.sent or self.hosts is None or path not in self.tree:
            return  # sent already (the cast answers this host too), or not ours to read
        self.sent.add(key)
        with open(os.path.join(self.root, path.lstrip("/")), "rb") as f:
            data = os.pread(f.fileno(), BLOCK, block * BLOCK)
        self.read_bytes += len(data)
        self.blocks += 1
        self.hosts.deliver.broadcast(path, block, data)

    @endpoint
    def refresh(self) -> list[str]:
        """List the directory again and update every host: the paths that changed.

        A file changed (size or mtime), added or removed loses its blocks on every host and
        here (its blocks will be read and cast again when asked for). The update is cast by
        this actor, after every block it cast before, so no host keeps an old block.
        """
        new = list_tree(self.root)
        changed = sorted(p for p in set(self.tree) | set(new) if self.tree.get(p) != new.get(p))
        self.tree = new
        gone = set(changed)
        self.sent = {k for k in self.sent if k[0] not in gone}
        if self.hosts is not None and changed:
            self.hosts.update.call(new, changed).get()
        return changed

    @endpoint
    def stats(self) -> dict[str, int]:
        """``{"blocks": cast, "bytes": read from disk and cast}``."""
        return {"blocks": self.blocks, "bytes": self.read_bytes}


def subdir_key(point: Any) -> str:
    """A host's key for ``$SUBDIR``: its coordinates, ``hosts_0`` (``""`` for one host)."""
    return "_".join(f"{k}_{v}" for k, v in dict(point).items())


class MountHost(Actor):
    """One host's side: the FUSE mount over a block cache fed by the source's casts."""

    def __init__(self, source: Any, tree: Tree, mntpoint: str) -> None:
        self.source = source
        self.tree = tree
        self.template = mntpoint
        self.fs: FuseMount | None = None
        self.cache: BlockCache | None = None

    @endpoint
    def mount(self) -> tuple[str, int]:
        """Mount (``$SUBDIR`` in the mount point becomes this host's key); the path and
        the pid of the proc serving it."""
        path = self.template.replace("$SUBDIR", subdir_key(current_rank()))
        cache = self.cache = BlockCache(self.tree, self._ask)
        self.fs = FuseMount(functools.partial(cache_operations, cache), path, cache.close)
        self.fs.start()
        return path, os.getpid()

    def _ask(self, path: str, block: int) -> None:
        self.source.want.broadcast(path, block)

    @endpoint
    def deliver(self, path: str, block: int, data: bytes) -> None:
        """A block cast by the source."""
        if self.cache is not None:
            self.cache.deliver(path, block, data)

    @endpoint
    def update(self, tree: Tree, changed: list[str]) -> None:
        """A new listing from the source (``refresh``): drop the changed files' blocks."""
        self.tree = tree
        if self.cache is not None:
            self.cache.update(tree, changed)

    @endpoint
    def unmount(self) -> None:
        """Unmount and drop the cache."""
        if self.fs is not None:
            self.fs.stop()
            self.fs = None


def fuse_available() -> str | None:
    """Why a FUSE mount cannot work here, or None if it can."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if not (shutil.which("fusermount3") or shutil.which("fusermount")):
        return "fusermount3 is not installed (Debian: apt-get install fuse3)"
    try:
        __import__("mfusepy")
    except (ImportError, OSError) as exc:
        return f"the FUSE binding is missing ({exc}); pip install 'regency[mount]'"
    return None


class MountHandler:
    """A live remote mount (what :func:`remotemount` returns): ``open()``, ``close()``."""

    def __init__(self, host_mesh: Any, sourcepath: str, mntpoint: str | None = None,
                 fanout: int = 1) -> None:
        if not Path(sourcepath).is_dir():
            raise ValueError(f"remotemount: the source {sourcepath!r} is not a directory")
        if fanout < 1:
            raise ValueError(f"remotemount: fanout must be at least 1, not {fanout}")
        self.host_mesh = host_mesh
        self.sourcepath = str(Path(sourcepath).resolve())
        self.mntpoint = mntpoint or self.sourcepath
        self.fanout = fanout
        self.mountpoints: list[str] = []
        self.pids: list[int] = []
        self._source: Any = None
        self._procs: Any = None
        self._hosts: Any = None

    def open(self) -> MountHandler:
        """Mount on every host; returns self (the mount points are in ``mountpoints``)."""
        problem = fuse_available()
        if problem:
            raise RuntimeError(f"remotemount: cannot mount with FUSE here: {problem}")
        try:
            self._source = this_proc().spawn("mount_source", MountSource, self.sourcepath)
            tree = self._source.listing.call_one().get()
            self._procs = self.host_mesh.spawn_procs(name="mount")
            with config.configured(max_cast_fanout=self.fanout):
                self._hosts = self._procs.spawn("mount", MountHost, self._source, tree,
                                                self.mntpoint)
            self._source.attach.call_one(self._hosts).get()
            got = self._hosts.mount.call().get()
        except BaseException:
            self.close()
            raise
        self.mountpoints = [p for _, (p, _pid) in got.items()]
        self.pids = [pid for _, (_p, pid) in got.items()]
        return self

    def refresh(self) -> list[str]:
        """Show the directory as it is now on every host (Monarch's ``refresh``).

        The listing is sent again; files changed, added or removed since the last listing
        are seen on every host when this returns (their cached blocks are dropped and
        fetched again on the next read). Returns the paths that changed (``/rel/path``).

        Raises:
            RuntimeError: the mount is not open.
        """
        if self._source is None:
            raise RuntimeError("remotemount: refresh() of a mount that is not open; call "
                               "open() first")
        changed: list[str] = self._source.refresh.call_one().get()
        return changed

    def stats(self) -> dict[str, int]:
        """What the controller has sent: ``{"blocks": n, "bytes": n}`` (each cast once)."""
        return dict(self._source.stats.call_one().get()) if self._source else {}

    def close(self) -> None:
        """Unmount everywhere and stop the mount's procs."""
        try:
            if self._hosts is not None:
                self._hosts.unmount.call().get()
        finally:
            if self._procs is not None:
                self._procs.stop().get()
            if self._source is not None:
                self._source.stop().get()
            self._hosts = self._procs = self._source = None

    def __enter__(self) -> MountHandler:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def remotemount(host_mesh: Any, sourcepath: str, mntpoint: str | None = None,
                fanout: int = 1) -> MountHandler:
    """Show the local directory ``sourcepath`` read-only at ``mntpoint`` (default: the same
    path) on every host of ``host_mesh``, through FUSE; call ``.open()`` to mount.

    Files are fetched on demand: a block read on any host is read once here and multicast to
    every host's cache down a relay tree of fan-out ``fanout``. ``$SUBDIR`` in ``mntpoint``
    becomes each host's coordinates (``hosts_0``), for several hosts on one machine.

    Example::

        with remotemount(hosts, "/data/shards", "/mnt/shards").open():
            procs.spawn("trainer", Trainer, "/mnt/shards")
    """
    return MountHandler(host_mesh, sourcepath, mntpoint, fanout)
