"""One host's side of a remote mount: a block cache on disk and the FUSE file system over it.

The FUSE file system (``mfusepy``, on libfuse 3 or 2) runs in a thread of the proc that
holds the mount. A read needs the blocks it touches; a block missing from the cache is asked
for once per host (``ask``), and every reader of it waits until it is delivered
(:meth:`BlockCache.deliver`, called when the controller's multicast arrives). The cache is
one sparse, already unlinked file per version of a mounted file (made in a private
temporary directory, removed on unmount).
"""

from __future__ import annotations

import errno
import importlib
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from ._tree import BLOCK, Tree, blocks_of, children

FETCH_TIMEOUT_S = 300.0
_READ_TRIES = 8  # a read restarted by this many refreshes in a row fails (EIO)


class BlockCache:
    """Blocks of the mounted files held on this host; ``ask(path, block)`` fetches one.

    A refresh (:meth:`update`) may change a file while a read of it is under way: the read
    then starts again on the new content, so it returns the old bytes or the new ones,
    never a mix. Each version of a file has its own cache file (unlinked once open): the
    old one stays readable until its last reader is done.
    """

    def __init__(self, tree: Tree, ask: Callable[[str, int], None]) -> None:
        self.tree = tree
        self.kids = children(tree)
        self.ask = ask
        self.dir = tempfile.mkdtemp(prefix="regency-mount-")
        self.have: set[tuple[str, int]] = set()
        self.asked: set[tuple[str, int]] = set()
        self.cond = threading.Condition()
        self.fds: dict[str, int] = {}
        self.versions: dict[str, int] = {}  # per path: how many refreshes changed it
        self.reading: dict[int, int] = {}  # per cache file: reads using it now
        self.retired: set[int] = set()  # cache files of old versions, closed when unread
        self.closed = False

    def _fd(self, path: str) -> int:
        """The cache file of ``path``'s current version (cond held)."""
        fd = self.fds.get(path)
        if fd is None:
            name = os.path.join(self.dir, "block-file")  # the name is free again at once:
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            os.unlink(name)  # the file lives as long as its descriptor
            self.fds[path] = fd
            self.reading[fd] = 0
        return fd

    def deliver(self, path: str, block: int, data: bytes) -> None:
        """Store a block that arrived and wake its readers.

        Called on the mount actor's thread, as :meth:`update` and :meth:`close` are: never
        at the same time as they.
        """
        with self.cond:
            if self.closed:
                return
            fd = self._fd(path)
        os.pwrite(fd, data, block * BLOCK)
        with self.cond:
            self.have.add((path, block))
            self.cond.notify_all()

    def ensure(self, path: str, block: int) -> bool:
        """Wait until ``block`` of ``path`` is here (asking for it if nobody on this host
        has); False if it did not come within :data:`FETCH_TIMEOUT_S`."""
        key = (path, block)
        with self.cond:
            if key in self.have:
                return True
            first = key not in self.asked
            self.asked.add(key)
        if first:
            self.ask(path, block)
        with self.cond:
            return self.cond.wait_for(
                lambda: key in self.have or self.closed or key not in self.asked,
                FETCH_TIMEOUT_S) and key in self.have

    def read(self, path: str, size: int, offset: int) -> bytes:
        """``size`` bytes at ``offset`` of ``path``, fetching what is missing."""
        for _ in range(_READ_TRIES):
            data = self._read_version(path, size, offset)
            if data is not None:
                return data
        raise OSError(errno.EIO, f"{path} changed {_READ_TRIES} times while it was read")

    def _read_version(self, path: str, size: int, offset: int) -> bytes | None:
        """The bytes of one version of ``path``; None if a refresh changed it meanwhile."""
        with self.cond:
            entry = self.tree.get(path)
            version = self.versions.get(path, 0)
        if entry is None:
            raise OSError(errno.ENOENT, f"{path} is gone (the mount was refreshed)")
        length = entry[1]
        for block in blocks_of(offset, size, length):
            if not self.ensure(path, block):
                if self.versions.get(path, 0) != version:
                    return None
                raise OSError(errno.EIO, f"block {block} of {path} did not arrive")
        with self.cond:
            if self.closed:
                raise OSError(errno.EIO, f"{path}: the mount is closing")
            if self.versions.get(path, 0) != version:
                return None
            fd = self._fd(path)
            self.reading[fd] += 1
        try:
            data = os.pread(fd, min(size, max(0, length - offset)), offset)
        finally:
            with self.cond:
                self.reading[fd] -= 1
                if fd in self.retired and not self.reading[fd]:
                    self._discard(fd)
        return data

    def update(self, tree: Tree, changed: list[str]) -> None:
        """A new listing: ``changed`` paths (modified, added or removed) lose their blocks.

        A read waiting for a block of a changed file asks for it again (the source forgot
        it had sent it), so it gets the new content; every later read does too.
        """
        dropped = set(changed)
        with self.cond:
            again = {(path, block) for path, block in self.asked
                     if path in dropped and (path, block) not in self.have
                     and path in tree and block * BLOCK < tree[path][1]}
            self.have = {k for k in self.have if k[0] not in dropped}
            self.asked = {k for k in self.asked if k[0] not in dropped} | again
            for path in dropped:
                self.versions[path] = self.versions.get(path, 0) + 1
                fd = self.fds.pop(path, None)
                if fd is not None:
                    self.retired.add(fd)
                    if not self.reading[fd]:
                        self._discard(fd)
            self.tree = tree
            self.kids = children(tree)
            self.cond.notify_all()  # readers of blocks that no longer exist fail now
        for path, block in sorted(again):
            self.ask(path, block)

    def _discard(self, fd: int) -> None:
        """Close an old version's cache file (cond held)."""
        self.retired.discard(fd)
        del self.reading[fd]
        os.close(fd)

    def close(self) -> None:
        """Wake any reader (they fail) and remove the cache."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            for fd in list(self.reading):
                if not self.reading[fd]:
                    self._discard(fd)
                else:
                    self.retired.add(fd)  # closed by its last reader
            self.fds.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


def cache_operations(cache: BlockCache, ready: threading.Event) -> Any:
    """An ``mfusepy.Operations`` serving ``cache`` read-only."""
    fuse = importlib.import_module("mfusepy")
    uid, gid = os.getuid(), os.getgid()

    def attrs(path: str) -> dict[str, Any]:
        entry = cache.tree.get(path)
        if entry is None:
            raise fuse.FuseOSError(errno.ENOENT)
        mode, size, mtime = entry
        return {"st_mode": mode, "st_size": size, "st_mtime": mtime / 1e9,
                "st_ctime": mtime / 1e9, "st_atime": mtime / 1e9, "st_uid": uid,
                "st_gid": gid, "st_nlink": 2 if stat.S_ISDIR(mode) else 1}

    class Ops(fuse.Operations):  # type: ignore[name-defined]
        def init(self, path: str) -> None:
            ready.set()

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            return attrs(path)

        def readdir(self, path: str, fh: int) -> list[str]:
            kids = cache.kids
            if path not in kids:
                raise fuse.FuseOSError(errno.ENOTDIR)
            return [".", "..", *kids[path]]

        def open(self, path: str, flags: int) -> int:
            if path not in cache.tree:
                raise fuse.FuseOSError(errno.ENOENT)
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise fuse.FuseOSError(errno.EROFS)
            return 0

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            try:
                return cache.read(path, size, offset)
            except OSError as exc:
                raise fuse.FuseOSError(exc.errno or errno.EIO) from exc

    return Ops()


class FuseMount:
    """A read-only FUSE mount at ``mountpoint``, served by a thread; ``make_ops(ready)``
    builds its ``mfusepy.Operations`` (whose ``init`` sets ``ready``)."""

    def __init__(self, make_ops: Callable[[threading.Event], Any], mountpoint: str,
                 on_stop: Callable[[], None] | None = None) -> None:
        self.make_ops = make_ops
        self.on_stop = on_stop
        self.mountpoint = mountpoint
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, name="regency-fuse", daemon=True)

    def _serve(self) -> None:
        fuse = importlib.import_module("mfusepy")
        try:
            fuse.FUSE(self.make_ops(self.ready), self.mountpoint, foreground=True,
                      ro=True, fsname="regency", auto_unmount=True, max_threads=16,
                      attr_timeout=0, entry_timeout=0, negative_timeout=0)
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self.error = exc
        finally:
            self.ready.set()

    def start(self, timeout: float = 60.0) -> None:
        """Mount and wait until the kernel has the mount; raises if it failed."""
        os.makedirs(self.mountpoint, exist_ok=True)
        self.thread.start()
        if not self.ready.wait(timeout) or not self.thread.is_alive():
            raise RuntimeError(f"FUSE could not mount {self.mountpoint!r} "
                               f"({self.error or 'no answer'}); is /dev/fuse there and "
                               "fusermount3 (the fuse3 package) installed?")

    def stop(self, timeout: float = 30.0) -> None:
        """Unmount, end the thread, drop the cache."""
        if self.thread.is_alive():
            tool = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount3"
            subprocess.run([tool, "-u", "-z", self.mountpoint], capture_output=True,
                           check=False, timeout=timeout)
            self.thread.join(timeout)
        if self.on_stop is not None:
            self.on_stop()
