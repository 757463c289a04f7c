"""Running one-sided transfers on the reader's side: pick the transport, move the bytes.

Theory of operation
-------------------
``start(op, desc, local, ...)`` validates sizes at once (``ValueError`` to the caller), then
returns a :class:`Completion` that a data-plane thread of this process completes. Small
``local`` and ``vm`` copies (up to ``INLINE_BYTES``) run on the calling thread instead: a
thread hop would cost more than the copy. Nothing here runs on, or waits for, an event loop,
and the owner's code never runs (its data-plane server threads serve socket transports).

* ``local``: look the registration up in this process and ``memmove`` (a device copy when
  either side is CUDA memory).
* ``cuda_ipc``: check the owner's slot (as ``vm`` does), map the owner's CUDA allocation
  with its IPC handle (once per allocation, :mod:`._cuda`), copy on the GPU (or between the
  GPU and local host memory), check the slot again.
* ``vm``: read the owner's validity slot (one 8-byte ``process_vm_readv``), copy with
  ``process_vm_readv``/``writev`` (split over a few threads for large copies), read the slot
  again: a buffer dropped meanwhile is an error, never silently stale data. If the kernel
  refuses (ptrace rules), remember it for that owner, warn once, and use a socket instead.
* ``unix``/``tcp``: a pooled, authenticated data connection to the owner's data-plane server;
  large transfers are striped over ``REGENCY_RDMA_STREAMS`` connections.

Where the local side is CUDA memory and the transport moves host bytes (``vm``, sockets),
the bytes are staged through pinned host buffers in chunks (:func:`._cuda.staged`), the
device copy of one chunk overlapping the host side of the next.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .._runtime._completion import Completion
from . import _cuda, _vm
from . import _proto as p
from ._choice import TransportChoice, choose
from ._client import Pool, read_ranges, transfer
from ._errors import BufferDroppedError, RDMAError, RDMATcpFallbackWarning
from ._handle import Descriptor
from ._identity import peer_info
from ._memory import Region
from ._registry import peek

__all__ = ["INLINE_BYTES", "READ", "WRITE", "Ranges", "current_choice", "ranges_of",
           "read_pieces", "start"]

#: ``(offset in the remote buffer, offset in local memory, length)``, in bytes.
Piece = tuple[int, int, int]

READ, WRITE = p.READ, p.WRITE

# A test hook (``regency.testing``-style): called between a ``cuda_ipc`` copy and its
# validity check, e.g. to drop the buffer while the read is in flight.
after_device_copy: Callable[[], None] | None = None
INLINE_BYTES = 1 << 20
_MIN_PIECE = 32 << 20  # split vm/socket transfers into pieces no smaller than this
_IOV_MAX = 1024  # iovecs one process_vm_readv takes (Linux's UIO_MAXIOV)
_GATHER_BYTES = 256 << 20  # bytes one call of ranges moves at most (the kernel: ~2 GiB)


def _env_int(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


class _State:
    """Per-process reader state (rebuilt after fork)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.pool = Pool()
        atexit.register(self.pool.close_all)
        self.executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="regency-data")
        self.vm_denied: set[tuple[str, int]] = set()
        self.warned = False


_state: _State | None = None
_state_lock = threading.Lock()


def _st() -> _State:
    global _state
    st = _state
    if st is None or st.pid != os.getpid():
        with _state_lock:
            if _state is None or _state.pid != os.getpid():
                _state = _State()
            st = _state
    return st


def _forced(transport: str | None) -> str | None:
    return transport or os.environ.get("REGENCY_RDMA_TRANSPORT") or None


def current_choice(desc: Descriptor, transport: str | None = None) -> TransportChoice:
    """The transport this process would use for ``desc`` now."""
    st = _st()
    owner = desc.owner
    denied = (owner.host_key, owner.pid) in st.vm_denied
    return choose(peer_info(), owner, has_unix=desc.unix is not None, vm_denied=denied,
                  forced=_forced(transport), ipc=_ipc_here(desc))


def _ipc_here(desc: Descriptor) -> str | None:
    """For CUDA memory: "" if this process can map it with CUDA IPC, else why not."""
    if not desc.on_device:
        return None
    if desc.ipc is None:
        return desc.ipc_error or "the owner could not export an IPC handle"
    try:
        import torch  # the reader of CUDA memory needs torch to copy it (already imported
        # wherever a CUDA tensor is at hand)
    except ImportError:
        return "torch is not installed in the reading process"
    if not torch.cuda.is_available():
        return "the reading process sees no CUDA device"
    return ""


def _check_sizes(op: int, desc: Descriptor, local: Region) -> None:
    if op == READ and local.nbytes < desc.size:
        raise ValueError(f"destination local memory size ({local.nbytes}) must be >= remote "
                         f"buffer size ({desc.size})")
    if op == WRITE:
        if local.nbytes > desc.size:
            raise ValueError(f"source local memory size ({local.nbytes}) must be <= remote "
                             f"buffer size ({desc.size})")
        if desc.readonly:
            raise ValueError(f"RDMABuffer {desc.reg_id} is read-only (it was registered from "
                             "read-only memory); write_from is not allowed")


def start(op: int, desc: Descriptor, local: Region, *, timeout: float,
          transport: str | None, secret: bytes, dead: Callable[[], str | None]) -> Completion:
    """Begin a transfer; returns its completion (value None).

    ``dead()`` says why the owner is known dead (None while it is not).

    Raises:
        ValueError: sizes or a forced transport do not fit (nothing was started).
    """
    _check_sizes(op, desc, local)
    choice = current_choice(desc, transport)
    nbytes = desc.size if op == READ else local.nbytes
    verb = "read_into" if op == READ else "write_from"
    done = Completion(f"RDMABuffer {desc.reg_id} {verb} of {nbytes} bytes over {choice.name}")
    deadline = time.monotonic() + timeout
    job = _Job(op, desc, local, nbytes, deadline, choice, transport, secret, dead, done)
    if _inline(choice.name, nbytes, local, desc):
        job.run()
    else:
        _st().executor.submit(job.run)
    return done


def _inline(name: str, nbytes: int, local: Region, desc: Descriptor) -> bool:
    """Whether to run on the calling thread: copies shorter than a thread hop."""
    if name == "cuda_ipc" or (name == "local" and (local.on_device or desc.on_device)):
        return local.on_device or nbytes <= INLINE_BYTES  # GPU copies: microseconds
    return name in ("local", "vm") and nbytes <= INLINE_BYTES and not local.on_device


def run_now(op: int, desc: Descriptor, local: Region, *, timeout: float, secret: bytes,
            dead: Callable[[], str | None]) -> None:
    """Run a transfer on this thread, to the end (for unpickling lent tensors).

    Raises what the transfer's Completion would fail with."""
    _check_sizes(op, desc, local)
    choice = current_choice(desc)
    nbytes = desc.size if op == READ else local.nbytes
    done = Completion(f"RDMABuffer {desc.reg_id} take of {nbytes} bytes over {choice.name}")
    _Job(op, desc, local, nbytes, time.monotonic() + timeout, choice, None, secret, dead,
         done).run()
    done.outcome()


@dataclass(frozen=True)
class Ranges:
    """Ranges of one buffer to read into local memory, batched once for ``process_vm_readv``
    (at most 1,022 ranges and ``_GATHER_BYTES`` a call): a plan keeps them for every read."""

    batches: list[list[Piece]]
    count: int
    nbytes: int
    remote_end: int  # where the last byte read from the buffer ends
    local_end: int  # where the last byte written locally ends


def ranges_of(pieces: list[Piece]) -> Ranges:
    """``pieces`` (remote offset, local offset, length), batched."""
    return Ranges(_batches(pieces, _IOV_MAX - 2, _GATHER_BYTES), len(pieces),
                  sum(n for _, _, n in pieces), max((r + n for r, _, n in pieces), default=0),
                  max((at + n for _, at, n in pieces), default=0))


def read_pieces(desc: Descriptor, local: Region, ranges: Ranges, *, timeout: float,
                secret: bytes, dead: Callable[[], str | None]) -> None:
    """Read many ranges of one buffer into host memory ``local``, on this thread, to the end.

    Where the owner is this process or on this host, the ranges go in a few system calls
    (``process_vm_readv`` takes up to 1,022 ranges and the validity slot twice); over a
    socket, as many in one request (``READV``). Raises what a transfer's Completion would fail with.
    """
    if local.on_device or desc.on_device:
        raise ValueError("read_pieces: host memory only")
    if ranges.remote_end > desc.size or ranges.local_end > local.nbytes:
        raise ValueError(f"read_pieces: ranges up to {ranges.remote_end} -> "
                         f"{ranges.local_end} do not fit {desc.size} -> {local.nbytes} bytes")
    choice = current_choice(desc)
    done = Completion(f"RDMABuffer {desc.reg_id} read of {ranges.count} ranges, "
                      f"{ranges.nbytes} bytes over {choice.name}")
    job = _Job(READ, desc, local, ranges.nbytes, time.monotonic() + timeout, choice, None,
               secret, dead, done)
    job.ranges = ranges
    job.run()
    done.outcome()


class _Job:
    """One transfer, run on whichever thread calls ``run``."""

    def __init__(self, op: int, desc: Descriptor, local: Region, nbytes: int, deadline: float,
                 choice: TransportChoice, forced: str | None, secret: bytes,
                 dead: Callable[[], str | None], done: Completion) -> None:
        self.op, self.desc, self.local, self.nbytes = op, desc, local, nbytes
        self.deadline, self.choice, self.forced = deadline, choice, forced
        self.secret, self.dead, self.done = secret, dead, done
        self.ranges: Ranges | None = None  # several ranges of a read, not the whole

    def run(self) -> None:
        try:
            self._run(self.choice.name)
        except BaseException as exc:
            self.done.set_exception(self._explain(exc))
        else:
            self.done.set_result(None)

    def _run(self, name: str) -> None:
        why = self.dead()
        if why is not None:
            raise RDMAError(f"the owner of RDMABuffer {self.desc.reg_id} is gone: {why}")
        if name == "local":
            self._local()
        elif name == "cuda_ipc":
            self._cuda_ipc()
        elif name == "vm":
            try:
                self._vm()
            except _vm.VmDenied:
                if _forced(self.forced):
                    raise
                self._fall_back()
        else:
            addr = self.desc.unix if name == "unix" else self.desc.tcp
            assert addr is not None
            self._sockets(addr)

    def _explain(self, exc: BaseException) -> BaseException:
        d = self.desc
        who = f"pid {d.owner.pid} on {d.owner.hostname}"
        if isinstance(exc, (BufferDroppedError, TimeoutError)):
            if isinstance(exc, TimeoutError):
                return TimeoutError(f"{self.done.label} did not finish in time")
            return exc
        why = self.dead()
        if d.on_device and (isinstance(exc, _vm.VmGone) or why is not None):
            _cuda.forget_owner(d.control)  # unmap its memory so the driver can free it
        if isinstance(exc, _vm.VmGone) or why is not None:
            return RDMAError(f"the owner of RDMABuffer {d.reg_id} ({who}) is gone"
                             + (f": {why}" if why else ""))
        if isinstance(exc, (OSError, ConnectionError, _cuda.CudaError)):
            return RDMAError(f"{self.done.label} failed ({who}): {exc}")
        return exc

    # -- local ---------------------------------------------------------------------------
    def _local(self) -> None:
        reg_table = peek()
        if reg_table is None:
            raise BufferDroppedError(f"RDMABuffer {self.desc.reg_id} not found: it was dropped")
        reg = reg_table.lookup(self.desc.reg_id, self.desc.key)
        remote = reg.region.address + self.desc.offset
        if self.ranges is not None:
            for batch in self.ranges.batches:
                for r, at, n in batch:
                    ctypes.memmove(self.local.address + at, remote + r, n)
            return
        if reg.region.on_device or self.local.on_device:
            self._device_copy(_bytes_of(reg.region, self.nbytes, self.desc.offset))
            return
        if self.op == READ:
            ctypes.memmove(self.local.address, remote, self.nbytes)
        else:
            ctypes.memmove(remote, self.local.address, self.nbytes)

    def _device_copy(self, remote: Any) -> None:
        """Copy between the local region and ``remote`` (a flat uint8 tensor)."""
        local = _bytes_of(self.local, self.nbytes)
        dst, src = (local, remote) if self.op == READ else (remote, local)
        device = next(t.device.index for t in (dst, src) if t.device.type == "cuda")
        _cuda.copy_bytes(dst, src, device)

    # -- CUDA IPC ------------------------------------------------------------------------
    def _cuda_ipc(self) -> None:
        d = self.desc
        error = self._slot_error(self._slot(), None)
        if error is not None:
            raise error  # dropped: never touch that memory
        assert d.ipc is not None
        device = self.local.device if self.local.on_device else _current_device()
        address = _cuda.open_peer(d.control, d.ipc, d.ipc_offset, device)
        self._device_copy(_cuda.device_bytes(address, self.nbytes, device))
        if after_device_copy is not None:
            after_device_copy()
        if self.op == READ:
            error = self._slot_error(d.key, self._slot())
            if error is not None:
                raise error

    # -- process_vm ----------------------------------------------------------------------
    def _slot_error(self, before: int, after: int | None) -> BufferDroppedError | None:
        d = self.desc
        if before == d.key and after in (None, d.key):
            return None
        when = " during the transfer; the data moved is not valid" if before == d.key else ""
        return BufferDroppedError(f"RDMABuffer {d.reg_id} of pid {d.owner.pid} on "
                                  f"{d.owner.hostname} was dropped{when}")

    def _slot(self) -> int:
        d = self.desc
        try:
            return _vm.read_u64(d.owner.pid, d.slot_addr)
        except OSError as exc:
            if isinstance(exc, (_vm.VmDenied, _vm.VmGone)):
                raise
            return 0  # the slot is not mapped there: not our owner any more

    def _vm(self) -> None:
        _vm.check_hook()
        pid, remote, local = self.desc.owner.pid, self.desc.address, self.local.address
        if self.ranges is not None:
            self._vm_pieces(pid, remote, local, self.ranges)
            return
        if self.local.on_device:
            self._vm_staged(pid, remote)
            return
        if self.op == READ and self.nbytes <= INLINE_BYTES:
            self._vm_small_read(pid, remote, local)
            return
        error = self._slot_error(self._slot(), None)
        if error is not None:
            raise error  # dropped: never touch that memory
        write = self.op == WRITE

        def piece(lo: int, hi: int) -> None:
            _vm.copy(pid, local + lo, remote + lo, hi - lo, write=write, deadline=self.deadline)

        _in_pieces(piece, self.nbytes, _env_int("REGENCY_RDMA_THREADS", min(4, _cpus())))
        if not write:
            error = self._slot_error(self.desc.key, self._slot())
            if error is not None:
                raise error

    def _vm_staged(self, pid: int, remote: int) -> None:
        """The owner's host memory <-> local CUDA memory, through pinned chunks."""
        error = self._slot_error(self._slot(), None)
        if error is not None:
            raise error
        write = self.op == WRITE
        pos = [remote]

        def io(chunk: memoryview) -> None:
            _vm.copy(pid, _cuda_address(chunk), pos[0], len(chunk), write=write,
                     deadline=self.deadline)
            pos[0] += len(chunk)

        _cuda.staged(_bytes_of(self.local, self.nbytes), self.local.device, to_host=write,
                     io=io)
        if not write:
            error = self._slot_error(self.desc.key, self._slot())
            if error is not None:
                raise error

    def _vm_small_read(self, pid: int, remote: int, local: int) -> None:
        """Slot, data, slot: one system call."""
        self._vm_gather(pid, [(local, remote, self.nbytes)])

    def _vm_pieces(self, pid: int, remote: int, local: int, ranges: Ranges) -> None:
        """Slot, up to 1,022 ranges of at most ``_GATHER_BYTES`` in all, slot: one system
        call per batch (the kernel copies at most about 2 GiB per call)."""
        for batch in ranges.batches:
            if time.monotonic() > self.deadline:
                raise TimeoutError("the transfer did not finish in time")
            self._vm_gather(pid, [(local + at, remote + r, n) for r, at, n in batch])

    def _vm_gather(self, pid: int, ranges: list[tuple[int, int, int]]) -> None:
        """Read ``(local, remote, n)`` ranges between two reads of the slot, in one call."""
        words = (ctypes.c_uint64 * 2)()
        base, slot = ctypes.addressof(words), self.desc.slot_addr
        try:
            _vm.gather(pid, [(base, slot, 8), *ranges, (base + 8, slot, 8)])
        except OSError as exc:
            if isinstance(exc, (_vm.VmDenied, _vm.VmGone)):
                raise
            words[0] = 0  # a range not mapped there: not our owner's buffer any more
        error = self._slot_error(int(words[0]), int(words[1]))
        if error is not None:
            raise error

    def _fall_back(self) -> None:
        st = _st()
        owner = self.desc.owner
        st.vm_denied.add((owner.host_key, owner.pid))
        self.choice = current_choice(self.desc, None)
        if not st.warned:
            st.warned = True
            warnings.warn(f"regency.rdma: process_vm_readv is not permitted here "
                          f"(ptrace rules); using {self.choice.name} for pairs on this host",
                          RDMATcpFallbackWarning, stacklevel=2)
        self._run(self.choice.name)

    # -- sockets -------------------------------------------------------------------------
    def _sockets(self, address: str) -> None:
        pool = _st().pool
        op, desc, secret, deadline = self.op, self.desc, self.secret, self.deadline
        if self.local.on_device:
            pos = [desc.offset]

            def io(chunk: memoryview) -> None:
                transfer(pool, address, secret, desc, op, chunk, pos[0], deadline)
                pos[0] += len(chunk)

            _cuda.staged(_bytes_of(self.local, self.nbytes), self.local.device,
                         to_host=op == WRITE, io=io)
            return
        if self.ranges is not None:
            view = self.local.view()
            for batch in self.ranges.batches:
                read_ranges(pool, address, secret, desc, view, batch, deadline)
            return
        view = self.local.view()[: self.nbytes]

        def piece(lo: int, hi: int) -> None:
            transfer(pool, address, secret, desc, op, view[lo:hi], desc.offset + lo, deadline)

        _in_pieces(piece, self.nbytes, _env_int("REGENCY_RDMA_STREAMS", _default_ways()))


def _batches(pieces: list[Piece], count: int, nbytes: int) -> list[list[Piece]]:
    """``pieces`` in batches of at most ``count`` ranges and ``nbytes`` bytes (a longer
    piece is cut)."""
    out: list[list[Piece]] = [[]]
    room = nbytes
    for r, at, n in pieces:
        while n:
            if len(out[-1]) == count or room == 0:
                out.append([])
                room = nbytes
            take = min(n, room)
            out[-1].append((r, at, take))
            r, at, n, room = r + take, at + take, n - take, room - take
    return [b for b in out if b]


def _bytes_of(region: Region, nbytes: int, offset: int = 0) -> Any:
    """``nbytes`` of a region from ``offset`` as a flat uint8 tensor (device or host; no
    copy)."""
    if region.on_device:
        return _cuda.device_bytes(region.address + offset, nbytes, region.device)
    return _cuda.host_bytes(region.view()[offset:offset + nbytes])


def _cuda_address(chunk: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(chunk))


def _current_device() -> int:
    import torch

    return int(torch.cuda.current_device())


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _default_ways() -> int:
    """Connections per large socket transfer: one per two cores, at most 4.

    Each stream keeps a core busy on both sides (reader and owner's server thread), so on a
    2-core machine one is best. (``vm`` pieces use one core each, the reader's: one per core.)
    """
    return max(1, min(4, _cpus() // 2))


def _in_pieces(fn: Callable[[int, int], None], n: int, ways: int) -> None:
    """Run ``fn(lo, hi)`` over ``[0, n)``, split over up to ``ways`` threads (this one too)."""
    ways = max(1, min(ways, n // _MIN_PIECE))
    if ways == 1:
        fn(0, n)
        return
    bounds = [n * i // ways for i in range(ways + 1)]
    errors: list[BaseException] = []

    def guarded(lo: int, hi: int) -> None:
        try:
            fn(lo, hi)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(bounds[i], bounds[i + 1]), daemon=True,
                                name="regency-data-piece") for i in range(1, ways)]
    for t in threads:
        t.start()
    guarded(bounds[0], bounds[1])
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
