"""One host's side of a remote mount: a block cache on disk and the FUSE file system over it.

The FUSE file system (``mfusepy``, on libfuse 3 or 2) runs in a thread of the proc that
holds the mount. A read needs the blocks it touches; a block missing from the cache is asked
for once per host (``ask``), and every reader of it waits until it is delivered
(:meth:`BlockCache.deliver`, called when the controller's multicast arrives). The cache is
one sparse file per mounted file, in a private temporary directory removed on unmount.
"""

from __future__ import annotations

import errno
import hashlib
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


class BlockCache:
    """Blocks of the mounted files held on this host; ``ask(path, block)`` fetches one."""

    def __init__(self, tree: Tree, ask: Callable[[str, int], None]) -> None:
        self.tree = tree
        self.kids = children(tree)
        self.ask = ask
        self.dir = tempfile.mkdtemp(prefix="regency-mount-")
        self.have: set[tuple[str, int]] = set()
        self.asked: set[tuple[str, int]] = set()
        self.cond = threading.Condition()
        self.fds: dict[str, int] = {}
        self.closed = False

    def _fd(self, path: str) -> int:
        with self.cond:
            fd = self.fds.get(path)
            if fd is None:
                name = hashlib.blake2b(path.encode(), digest_size=16).hexdigest()
                fd = os.open(os.path.join(self.dir, name), os.O_RDWR | os.O_CREAT, 0o600)
                self.fds[path] = fd
            return fd

    def deliver(self, path: str, block: int, data: bytes) -> None:
        """Store a block that arrived and wake its readers."""
        if self.closed:
            return
        os.pwrite(self._fd(path), data, block * BLOCK)
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
        entry = self.tree.get(path)
        if entry is None:
            raise OSError(errno.ENOENT, f"{path} is gone (the mount was refreshed)")
        length = entry[1]
        for block in blocks_of(offset, size, length):
            if not self.ensure(path, block):
                raise OSError(errno.EIO, f"block {block} of {path} did not arrive")
        return os.pread(self._fd(path), min(size, max(0, length - offset)), offset)

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
                fd = self.fds.pop(path, None)
                if fd is not None:
                    os.ftruncate(fd, 0)
                    os.close(fd)
            self.tree = tree
            self.kids = children(tree)
            self.cond.notify_all()  # readers of blocks that no longer exist fail now
        for path, block in sorted(again):
            self.ask(path, block)

    def close(self) -> None:
        """Wake any reader (they fail) and remove the cache."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            for fd in self.fds.values():
                os.close(fd)
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
