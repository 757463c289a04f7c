"""``gather_mount(host_mesh, remote_path, local_path)``: every host's directory, here.

A :class:`GatherHost` actor on one proc per host answers ``stat``, ``listdir`` and ``read``
under its directory (``$SUBDIR`` in the path becomes the host's key, ``hosts_0``). The
controller mounts a read-only FUSE file system whose root holds one subdirectory per host
(named by that key; a single host with no coordinates is mounted directly) and forwards
each operation to that host's actor as it happens: nothing is cached, so a log a host is
still writing shows its new lines on the next read.
"""

from __future__ import annotations

import errno
import functools
import importlib
import os
import stat
import threading
from typing import Any

from .._api._actor import Actor, endpoint
from .._api._context import current_rank
from ._fs import FuseMount
from ._remote import fuse_available, subdir_key
from ._tree import Entry

__all__ = ["GatherHost", "GatherMount", "gather_mount"]

CALL_TIMEOUT_S = 60.0


class GatherHost(Actor):
    """One host's directory, read-only, for the controller's gather mount."""

    def __init__(self, template: str) -> None:
        self.template = template
        self.root = ""

    @endpoint
    def key(self) -> str:
        """This host's key; fixes the directory served (``$SUBDIR`` replaced)."""
        key = subdir_key(current_rank())
        self.root = os.path.realpath(self.template.replace("$SUBDIR", key))
        return key

    def _path(self, rel: str) -> str:
        path = os.path.realpath(os.path.join(self.root, rel.lstrip("/")))
        if path != self.root and not path.startswith(self.root + os.sep):
            raise PermissionError(errno.EACCES, f"{rel} leaves {self.root}")
        return path

    @endpoint
    def stat(self, rel: str) -> Entry | None:
        """``(mode, size, mtime_ns)`` of ``rel``; None if there is none."""
        try:
            st = os.stat(self._path(rel))
        except OSError:
            return None
        return (st.st_mode & ~0o222, st.st_size, st.st_mtime_ns)

    @endpoint
    def listdir(self, rel: str) -> list[str] | None:
        """The names in directory ``rel``; None if it is not one."""
        try:
            return sorted(os.listdir(self._path(rel)))
        except OSError:
            return None

    @endpoint
    def read(self, rel: str, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` of ``rel``."""
        with open(self._path(rel), "rb") as f:
            return os.pread(f.fileno(), size, offset)


def _operations(hosts: dict[str, Any], ready: threading.Event) -> Any:
    fuse = importlib.import_module("mfusepy")
    uid, gid = os.getuid(), os.getgid()
    flat = list(hosts) == [""]

    def split(path: str) -> tuple[Any, str] | None:
        if flat:
            return hosts[""], path
        parts = path.split("/", 2)
        actor = hosts.get(parts[1])
        return None if actor is None else (actor, "/" + (parts[2] if len(parts) > 2 else ""))

    def ask(path: str, method: str, *args: Any) -> Any:
        where = split(path)
        if where is None:
            raise fuse.FuseOSError(errno.ENOENT)
        actor, rel = where
        try:
            return getattr(actor, method).call_one(rel, *args).get(timeout=CALL_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a host that cannot answer is an I/O error
            raise fuse.FuseOSError(errno.EIO) from exc

    class Ops(fuse.Operations):  # type: ignore[name-defined]
        def init(self, path: str) -> None:
            ready.set()

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            if path == "/" and not flat:
                mode, size, mtime = stat.S_IFDIR | 0o555, 0, 0
            else:
                entry = ask(path, "stat")
                if entry is None:
                    raise fuse.FuseOSError(errno.ENOENT)
                mode, size, mtime = entry
            return {"st_mode": mode, "st_size": size, "st_mtime": mtime / 1e9,
                    "st_ctime": mtime / 1e9, "st_atime": mtime / 1e9, "st_uid": uid,
                    "st_gid": gid, "st_nlink": 2 if stat.S_ISDIR(mode) else 1}

        def readdir(self, path: str, fh: int) -> list[str]:
            names = sorted(hosts) if path == "/" and not flat else ask(path, "listdir")
            if names is None:
                raise fuse.FuseOSError(errno.ENOTDIR)
            return [".", "..", *names]

        def open(self, path: str, flags: int) -> int:
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise fuse.FuseOSError(errno.EROFS)
            return 0

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return bytes(ask(path, "read", offset, size))

    return Ops()


class GatherMount:
    """A live gather mount (what :func:`gather_mount` returns); ``close()`` unmounts."""

    def __init__(self, procs: Any, fs: FuseMount) -> None:
        self._procs = procs
        self._fs: FuseMount | None = fs

    @property
    def mountpoint(self) -> str:
        """Where the hosts' directories are shown."""
        return self._fs.mountpoint if self._fs else ""

    def close(self) -> None:
        """Unmount, then stop the hosts' procs serving it."""
        if self._fs is not None:
            try:
                self._fs.stop()
            finally:
                self._fs = None
                self._procs.stop().get()

    def __enter__(self) -> GatherMount:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def gather_mount(host_mesh: Any, remote_mount_point: str,
                 local_mount_point: str) -> GatherMount:
    """Show every host's ``remote_mount_point`` read-only under ``local_mount_point``, one
    subdirectory per host named by its coordinates (``hosts_0``); live on return.

    ``$SUBDIR`` in ``remote_mount_point`` becomes each host's key, for a different path per
    host (``/data/$SUBDIR/logs``). Example::

        with gather_mount(hosts, "/tmp/run/logs", "/tmp/all-logs"):
            print(open("/tmp/all-logs/hosts_1/rank0.log").read())
    """
    problem = fuse_available()
    if problem:
        raise RuntimeError(f"gather_mount: cannot mount with FUSE here: {problem}")
    procs = host_mesh.spawn_procs(name="gather")
    try:
        actors = procs.spawn("gather", GatherHost, remote_mount_point)
        keys = actors.key.call().get(timeout=CALL_TIMEOUT_S)
        hosts = {key: actors.slice(**dict(point)) for point, key in keys.items()}
        fs = FuseMount(functools.partial(_operations, hosts), local_mount_point)
        fs.start()
    except BaseException:
        procs.stop().get()
        raise
    return GatherMount(procs, fs)
