"""``RDMABuffer`` and ``RDMAAction``: the user-facing handles of the data plane."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from typing import Any, NamedTuple

from .._api._bootstrap import runtime
from .._api._future import Future, completed, failed
from .._runtime._completion import Completion
from .._runtime._runtime import Runtime
from .._wire._messages import RdmaDrop, Reply
from . import _cuda, _transfer
from ._choice import TransportChoice, choose
from ._handle import Descriptor
from ._identity import PeerInfo, peer_info
from ._memory import Region, buffer_region, local_region
from ._owner import contact, ensure_owner, watch_deaths
from ._registry import peek, registry

__all__ = ["BufferOwner", "RDMAAction", "RDMABuffer"]

DEFAULT_TIMEOUT = 60.0


class BufferOwner(NamedTuple):
    """Where a buffer lives: the owner proc's runtime address, host name and pid."""

    address: str
    hostname: str
    pid: int

    def __str__(self) -> str:
        return self.address


def _check_timeout(timeout: float) -> float:
    timeout = float(timeout)
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    return timeout


class RDMABuffer:
    """A registered region of memory in one process, readable and writable from any other.

    ``RDMABuffer(data)`` registers ``data`` (a 1-D contiguous CPU or CUDA torch tensor, a
    numpy array, a ``bytearray`` or a 1-D contiguous memoryview) with this process, which
    becomes its
    *owner*; the memory stays registered (and alive) until :meth:`drop`. The handle is an
    ordinary picklable value: return it from an endpoint or pass it as an argument, and the
    receiver moves bytes one-sidedly with :meth:`read_into` / :meth:`write_from`, without
    the owner's actor code running. View a tensor of any shape as bytes first:
    ``RDMABuffer(t.view(torch.uint8).flatten())``.
    """

    __slots__ = ("_desc",)
    _desc: Descriptor

    def __init__(self, data: Any) -> None:
        self._desc = register(buffer_region(data))

    @classmethod
    def _rebuild(cls, desc: Descriptor) -> RDMABuffer:
        self = object.__new__(cls)
        self._desc = desc
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (RDMABuffer._rebuild, (self._desc,))

    # -- what it is ----------------------------------------------------------------------
    def size(self) -> int:
        """The size of the buffer in bytes."""
        return self._desc.size

    @property
    def owner(self) -> BufferOwner:
        """The process that owns the memory."""
        d = self._desc
        return BufferOwner(d.control, d.owner.hostname, d.owner.pid)

    @property
    def backend(self) -> str:
        """The transport this process would use for this buffer now (``transport_for()``)."""
        return self.transport_for().name

    @property
    def readonly(self) -> bool:
        """Whether the buffer was registered from read-only memory (no ``write_from``)."""
        return self._desc.readonly

    def transport_for(self, reader: PeerInfo | None = None) -> TransportChoice:
        """Which transport ``reader`` (default: this process) uses for this buffer, and why.

        ``reader`` is a :class:`PeerInfo` from :func:`regency.rdma.peer_info` in that process.
        """
        if reader is None or reader == peer_info():
            return _transfer.current_choice(self._desc)
        d = self._desc
        return choose(reader, d.owner, has_unix=d.unix is not None,
                      forced=os.environ.get("REGENCY_RDMA_TRANSPORT") or None)

    def __getitem__(self, index: slice) -> RDMABuffer:
        """A handle to bytes ``[start:stop]`` of this buffer (a regency extension).

        Transfers through it move only those bytes (``read_into`` fills the first
        ``stop - start`` bytes of its destination); it pickles like any handle. ``drop()``
        through either releases the whole registration.

        Raises:
            TypeError: ``index`` is not a slice.
            ValueError: its step is not 1.
        """
        if not isinstance(index, slice):
            raise TypeError(f"an RDMABuffer is sliced by bytes, buf[start:stop]; got "
                            f"{type(index).__name__}")
        d = self._desc
        start, stop, step = index.indices(d.size)
        if step != 1:
            raise ValueError(f"an RDMABuffer slice must be contiguous (step 1), got {step}")
        stop = max(start, stop)
        return RDMABuffer._rebuild(replace(
            d, address=d.address + start, size=stop - start, offset=d.offset + start,
            ipc_offset=d.ipc_offset + start, part=True))

    def __repr__(self) -> str:
        d = self._desc
        part = f" [{d.offset}:{d.offset + d.size}]" if d.part else ""
        return (f"<RDMABuffer {d.reg_id}{part}: {d.size} bytes ({d.kind} {d.dtype}"
                f"{', read-only' if d.readonly else ''}) owned by pid {d.owner.pid} on "
                f"{d.owner.hostname}>")

    # -- transfers -----------------------------------------------------------------------
    def read_into(self, dst: Any, *, timeout: float = DEFAULT_TIMEOUT,
                  transport: str | None = None) -> Future[None]:
        """Copy the whole buffer into local memory ``dst`` (its first ``size()`` bytes).

        ``dst``: a contiguous, writable tensor, array, bytearray or memoryview of at least
        ``size()`` bytes. ``transport`` forces one (``"vm"``, ``"unix"``, ``"tcp"``, ...).

        Raises (at once):
            ValueError: ``dst`` too small, not contiguous or read-only; or ``transport``
                cannot be used for this pair.
        The Future fails with ``BufferDroppedError`` if the buffer was dropped, ``RDMAError``
        if its owner is gone, ``TimeoutError`` after ``timeout`` seconds.
        """
        local = local_region(dst, writable=True, what="read_into")
        return self._start(_transfer.READ, local, timeout, transport)

    def write_from(self, src: Any, *, timeout: float = DEFAULT_TIMEOUT,
                   transport: str | None = None) -> Future[None]:
        """Copy local memory ``src`` (at most ``size()`` bytes) to the start of the buffer.

        Raises (at once):
            ValueError: ``src`` larger than the buffer or not contiguous; the buffer is
                read-only; or ``transport`` cannot be used for this pair.
        The Future fails like :meth:`read_into`'s.
        """
        local = local_region(src, writable=False, what="write_from")
        return self._start(_transfer.WRITE, local, timeout, transport)

    def _start(self, op: int, local: Region, timeout: float,
               transport: str | None) -> Future[None]:
        timeout = _check_timeout(timeout)
        rt = runtime()
        addr = self._desc.control
        if self._desc.on_device:
            watch_deaths(rt)
        done = _transfer.start(op, self._desc, local, timeout=timeout, transport=transport,
                               secret=rt.secret, dead=lambda: rt.dead_addrs.get(addr))
        return Future._from(done)

    # -- release -------------------------------------------------------------------------
    def drop(self, *, timeout: float = DEFAULT_TIMEOUT) -> Future[None]:
        """Release the registration on the owner; later transfers fail with
        ``BufferDroppedError``. Dropping twice is harmless."""
        d = self._desc
        here = peek()
        if d.owner.same_process(peer_info()):
            if here is not None:
                here.drop(d.reg_id, d.key)
            return completed(None)
        rt = runtime()
        why = rt.dead_addrs.get(d.control)
        if why is not None:
            return completed(None)  # the owner is gone: so is its memory
        return _remote_drop(rt, d, _check_timeout(timeout))


class _DropWaiter:
    """Completes a remote drop when the owner answers, or fails it when the owner dies."""

    def __init__(self, rt: Runtime, done: Completion, port: int) -> None:
        self.rt, self.done, self.port = rt, done, port
        self.label = done.label

    def on_reply(self, reply: Reply, frame: list[memoryview]) -> None:
        self.finish()
        self.done.set_result(None)

    def lost(self, exc: BaseException) -> None:
        self.finish()
        self.done.set_result(None)  # the owner died: its memory is released all the same

    def finish(self) -> None:
        self.rt.close_port(self.port)
        self.rt.collectors.pop(self.port, None)


def _remote_drop(rt: Runtime, d: Descriptor, timeout: float) -> Future[None]:
    done = Completion(f"drop of RDMABuffer {d.reg_id}")
    holder: list[_DropWaiter] = []

    def setup() -> None:
        port = rt.open_port(lambda reply, frame: holder[0].on_reply(reply, frame),
                            targets=frozenset({d.control}))
        waiter = _DropWaiter(rt, done, port)
        holder.append(waiter)
        rt.collectors[port] = waiter
        rt.send_sys(d.control, RdmaDrop(d.reg_id, d.key, (contact(rt), port)))
        rt.loop.call_later(timeout, lambda: _expire(waiter, timeout))

    rt.call_soon(setup)
    return Future._from(done)


def _expire(waiter: _DropWaiter, timeout: float) -> None:
    if not waiter.done.done():
        waiter.finish()
        waiter.done.set_exception(TimeoutError(f"{waiter.label}: no answer within {timeout}s"))


def register(region: Region, takers: int = 0) -> Descriptor:
    """Register ``region`` with this process and describe it for readers elsewhere.

    ``takers``: a lent tensor, dropped after that many takes (0: until ``drop()``)."""
    ipc, ipc_offset, ipc_error = None, 0, ""
    if region.on_device:
        try:
            export = _cuda.ipc_export(region.address, region.device)
            ipc, ipc_offset = export.handle, export.offset
        except (_cuda.CudaError, OSError, AttributeError) as exc:
            ipc_error = str(exc)
    rt = runtime()
    server = ensure_owner(rt)
    reg = registry().register(region, takers)
    return Descriptor(
        reg_id=reg.reg_id, key=reg.key, size=region.nbytes, readonly=region.readonly,
        address=region.address, slot_addr=reg.slot_addr, owner=peer_info(),
        control=contact(rt), unix=server.unix, tcp=server.tcp, kind=region.kind,
        dtype=region.dtype, device=region.device, ipc=ipc, ipc_offset=ipc_offset,
        ipc_error=ipc_error)


class RDMAAction:
    """A batch of transfers submitted together (Monarch's ``RDMAAction``).

    ``read_remote(dst, buf)`` and ``write_remote(buf, src)`` queue operations (checked at
    once); ``submit()`` starts them all, concurrently, and returns a Future that completes
    when all have completed, or fails with the first error. It may be submitted again.
    """

    def __init__(self) -> None:
        self._ops: list[tuple[int, RDMABuffer, Any, Region]] = []

    def read_remote(self, dst: Any, src: RDMABuffer) -> RDMAAction:
        """Queue ``src.read_into(dst)``."""
        region = local_region(dst, writable=True, what="read_remote")
        if region.nbytes < src.size():
            raise ValueError(f"destination local memory size ({region.nbytes}) must be >= "
                             f"remote buffer size ({src.size()})")
        for op, buf, _, other in self._ops:
            if op == _transfer.READ and _overlap(region, src.size(), other, buf.size()):
                raise ValueError("read_remote: destination overlaps the destination of an "
                                 "earlier read in this action")
        self._ops.append((_transfer.READ, src, dst, region))
        return self

    def write_remote(self, dst: RDMABuffer, src: Any) -> RDMAAction:
        """Queue ``dst.write_from(src)``."""
        region = local_region(src, writable=False, what="write_remote")
        if region.nbytes > dst.size():
            raise ValueError(f"source local memory size ({region.nbytes}) must be <= remote "
                             f"buffer size ({dst.size()})")
        self._ops.append((_transfer.WRITE, dst, src, region))
        return self

    def fetch_add(self, src: RDMABuffer, dst: Any, add: int) -> RDMAAction:
        """Not supported: remote atomics (Monarch 0.7.0's raises the same error).

        Raises:
            NotImplementedError: always; move the value with read_remote/write_remote and
                let one actor own updates to it."""
        raise NotImplementedError("Not yet supported: RDMAAction.fetch_add (no remote atomics; "
                                  "read_remote/write_remote move bytes, and one actor should "
                                  "own updates to a shared counter)")

    def compare_and_swap(self, src: RDMABuffer, dst: Any, compare: int,
                         swap: int) -> RDMAAction:
        """Not supported: remote atomics (Monarch 0.7.0's raises the same error).

        Raises:
            NotImplementedError: always, as ``fetch_add``."""
        raise NotImplementedError("Not yet supported: RDMAAction.compare_and_swap (no remote "
                                  "atomics; let one actor own the value and call it)")

    def submit(self, *, timeout: float = DEFAULT_TIMEOUT) -> Future[None]:
        """Start every queued operation; the Future completes when all have."""
        if not self._ops:
            return completed(None)
        try:
            futures = [buf._start(op, region, timeout, None)
                       for op, buf, _, region in self._ops]
        except Exception as exc:
            return failed(exc)
        done = Completion(f"RDMAAction of {len(futures)} transfers")
        left = [len(futures)]
        lock = threading.Lock()

        def one(c: Completion) -> None:
            exc = c.exception()
            if exc is not None:
                done.set_exception(exc)
                return
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                done.set_result(None)

        for f in futures:
            f._completion.add_done_callback(one)
        return Future._from(done)


def _overlap(a: Region, a_len: int, b: Region, b_len: int) -> bool:
    return a.address < b.address + b_len and b.address < a.address + a_len
