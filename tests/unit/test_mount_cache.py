"""The remote mount's block cache on one host (``regency._mount._fs.BlockCache``), without
FUSE: what a read returns while a refresh changes the file under it."""

from __future__ import annotations

import os
import queue
import stat
import threading

from regency._mount._fs import BlockCache
from regency._mount._tree import BLOCK, Tree

FILE = stat.S_IFREG | 0o444
DIR = stat.S_IFDIR | 0o555


def _tree(mtime: int) -> Tree:
    return {"/": (DIR, 0, 0), "/f": (FILE, 2 * BLOCK, mtime)}


def _cache_files_open(cache: BlockCache) -> int:
    """This process's descriptors of files made in the cache's directory (unlinked ones
    read ``<dir>/block-file (deleted)``)."""
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            held += os.readlink(f"/proc/self/fd/{fd}").startswith(cache.dir + "/")
        except OSError:
            pass  # closed meanwhile (the listing's own descriptor)
    return held


class _Reader(threading.Thread):
    def __init__(self, cache: BlockCache) -> None:
        super().__init__(daemon=True)
        self.cache = cache
        self.result: bytes | BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.cache.read("/f", 2 * BLOCK, 0)
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            self.result = exc


def test_a_read_across_a_refresh_returns_the_new_file_whole_not_a_mix() -> None:
    asked: queue.Queue[tuple[str, int]] = queue.Queue()
    cache = BlockCache(_tree(1), lambda path, block: asked.put((path, block)))
    try:
        reader = _Reader(cache)
        reader.start()
        assert asked.get(timeout=30) == ("/f", 0)
        cache.deliver("/f", 0, b"o" * BLOCK)  # the old block 0
        assert asked.get(timeout=30) == ("/f", 1)  # the reader waits for block 1 now
        cache.update(_tree(2), ["/f"])  # the file changed: block 1 is asked for again
        assert asked.get(timeout=30) == ("/f", 1)
        cache.deliver("/f", 1, b"N" * BLOCK)
        assert asked.get(timeout=30) == ("/f", 0)  # the read started over, on the new file
        cache.deliver("/f", 0, b"N" * BLOCK)
        reader.join(30)
        assert not reader.is_alive()
        assert reader.result == b"N" * (2 * BLOCK)
    finally:
        cache.close()


def test_refreshes_and_close_leave_no_cache_file_open() -> None:
    cache = BlockCache(_tree(1), lambda path, block: None)
    for version in range(3):
        cache.deliver("/f", 0, bytes([version]) * BLOCK)
        cache.deliver("/f", 1, bytes([version]) * BLOCK)
        assert cache.read("/f", 2, BLOCK - 1) == bytes([version]) * 2
        assert _cache_files_open(cache) == 1  # this version's
        cache.update(_tree(version + 2), ["/f"])
        assert _cache_files_open(cache) == 0  # the old version's is closed: nobody reads it
    cache.deliver("/f", 0, b"x" * BLOCK)
    cache.close()
    assert _cache_files_open(cache) == 0
    assert not os.path.exists(cache.dir)
