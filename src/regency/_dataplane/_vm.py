"""``process_vm_readv`` / ``process_vm_writev`` through ctypes: one copy between two processes.

The kernel copies straight between the two address spaces; the other process runs none of
its code (it need not even be scheduled). The calling thread releases the GIL for the copy
(ctypes foreign calls do). Copies are chunked (``CHUNK`` bytes per call) so that a deadline is
checked between chunks and no single call pins a huge range; the kernel may also copy less
than asked, and we continue where it stopped.

Permission is the ptrace "attach" check: same user and, under Yama ``ptrace_scope`` 1, only
a descendant (or a process that allowed us with ``PR_SET_PTRACER``), unless we hold
``CAP_SYS_PTRACE``. A refusal raises :class:`VmDenied` so that the caller can fall back.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import time

__all__ = ["CHUNK", "VmDenied", "VmGone", "available", "check_hook", "copy", "gather",
           "read_u64"]

CHUNK = 64 << 20


class VmDenied(PermissionError):
    """The kernel refused process_vm_readv/writev for this pair (ptrace rules) or lacks it."""


class VmGone(ProcessLookupError):
    """The owner process does not exist any more."""


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _load() -> tuple[object, object] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        readv, writev = libc.process_vm_readv, libc.process_vm_writev
    except (OSError, AttributeError):
        return None
    for fn in (readv, writev):
        fn.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong,
                       ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.c_ulong]
        fn.restype = ctypes.c_ssize_t
    return readv, writev


_FNS = _load()


def available() -> bool:
    """Whether this libc has the two calls (Linux >= 3.2, glibc >= 2.15)."""
    return _FNS is not None


def _fail(err: int, pid: int) -> OSError:
    if err in (errno.EPERM, errno.EACCES):
        return VmDenied(err, f"process_vm_readv/writev on pid {pid} not permitted: "
                             f"{os.strerror(err)}")
    if err == errno.ENOSYS:
        return VmDenied(err, "process_vm_readv/writev not implemented by this kernel")
    if err == errno.ESRCH:
        return VmGone(err, f"process {pid} does not exist")
    return OSError(err, f"process_vm_readv/writev on pid {pid}: {os.strerror(err)}")


def copy(pid: int, local: int, remote: int, nbytes: int, *, write: bool,
         deadline: float | None = None) -> None:
    """Copy ``nbytes`` between our address ``local`` and ``remote`` in process ``pid``.

    ``write=False`` reads remote -> local, ``write=True`` writes local -> remote.

    Raises:
        VmDenied: not permitted for this pair (or not supported).
        VmGone: the process is gone.
        OSError: EFAULT and friends (the remote range is not mapped).
        TimeoutError: ``deadline`` (a ``time.monotonic()`` value) passed between chunks.
    """
    if _FNS is None:
        raise VmDenied(errno.ENOSYS, "process_vm_readv/writev are not available here")
    fn = _FNS[1] if write else _FNS[0]
    lio, rio = _IoVec(), _IoVec()
    done = 0
    while done < nbytes:
        if deadline is not None and done and time.monotonic() > deadline:
            raise TimeoutError(f"transfer timed out after {done} of {nbytes} bytes")
        n = min(CHUNK, nbytes - done)
        lio.base, lio.len = local + done, n
        rio.base, rio.len = remote + done, n
        got = fn(pid, ctypes.byref(lio), 1, ctypes.byref(rio), 1, 0)  # type: ignore[operator]
        if got < 0:
            raise _fail(ctypes.get_errno(), pid)
        if got == 0:
            raise OSError(errno.EFAULT, f"process_vm copy on pid {pid} made no progress")
        done += got


def gather(pid: int, pieces: list[tuple[int, int, int]]) -> None:
    """One ``process_vm_readv`` of several ``(local, remote, nbytes)`` pieces, in order.

    The kernel copies the pieces one after the other, so ``[slot, data, slot]`` reads the
    validity word before and after the data in a single system call.

    Raises:
        VmDenied, VmGone, OSError: as :func:`copy` (a short copy is EFAULT).
    """
    if _FNS is None:
        raise VmDenied(errno.ENOSYS, "process_vm_readv/writev are not available here")
    n = len(pieces)
    lio, rio = (_IoVec * n)(), (_IoVec * n)()
    for i, (local, remote, size) in enumerate(pieces):
        lio[i].base, lio[i].len = local, size
        rio[i].base, rio[i].len = remote, size
    total = sum(size for _, _, size in pieces)
    got = _FNS[0](pid, lio, n, rio, n, 0)  # type: ignore[operator]
    if got < 0:
        raise _fail(ctypes.get_errno(), pid)
    if got != total:
        raise OSError(errno.EFAULT, f"process_vm_readv on pid {pid} copied {got} of {total} "
                                    "bytes")


def check_hook() -> None:
    """The test hook ``REGENCY_RDMA_DENY_VM=1``: act as if the kernel refused (EPERM)."""
    if os.environ.get("REGENCY_RDMA_DENY_VM") == "1":
        raise VmDenied(errno.EPERM, "process_vm_readv/writev not permitted "
                                    "(REGENCY_RDMA_DENY_VM=1)")


def read_u64(pid: int, remote: int) -> int:
    """One 64-bit word of process ``pid`` (a registration slot)."""
    word = ctypes.c_uint64(0)
    copy(pid, ctypes.addressof(word), remote, 8, write=False)
    return int(word.value)
