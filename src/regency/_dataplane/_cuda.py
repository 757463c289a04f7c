"""CUDA memory for the data plane: IPC handles, mappings of peers' memory, staged copies.

Theory of operation
-------------------
Nothing here is imported or initialised unless a CUDA tensor reaches the data plane, and
then torch is already imported (a CUDA tensor exists). Four driver calls come from
``libcuda.so.1`` through ctypes (no compiled code, no CUDA toolkit needed):
``cuMemGetAddressRange`` (the allocation a pointer lies in), ``cuIpcGetMemHandle`` (a handle
another process can open), ``cuIpcOpenMemHandle`` / ``cuIpcCloseMemHandle`` (map and unmap
a peer's allocation). Each runs with the device's *primary context* pushed on the calling
thread: the context torch's runtime uses, whatever thread calls.

Copies use torch itself: device memory (ours or a peer's mapping) is wrapped as a flat
``uint8`` tensor through ``__cuda_array_interface__`` (no copy), host memory through
``torch.frombuffer``, and ``copy_`` moves the bytes on a stream of this thread's own,
synchronised before returning. Host staging for socket transports goes through pinned
buffers, in chunks, two at a time, so the device copy of one chunk overlaps the socket I/O of
the other.

The allocation behind a caching-allocator block is opened once per (owner, handle) and kept
in a bounded cache: the same block is sent again and again in steady state, and opening a
handle costs far more than a copy of a few megabytes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["CudaError", "IpcExport", "available", "copy_bytes", "device_bytes", "host_bytes",
           "ipc_export", "open_peer", "staged", "status", "sync_device"]

_HANDLE_BYTES = 64
_LAZY_PEER_ACCESS = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
_MAX_MAPPINGS = 256
STAGE_CHUNK = 32 << 20


class CudaError(RuntimeError):
    """A CUDA driver call failed (the message names the call and the driver's reason)."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * _HANDLE_BYTES)]


class _Driver:
    """The few driver entry points the data plane needs, bound lazily."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("cuda") or "libcuda.so.1"
        lib = ctypes.CDLL(name)
        self.lib = lib
        u64p, sizep = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t)
        self.init = self._fn("cuInit", [ctypes.c_uint])
        self.range = self._fn("cuMemGetAddressRange_v2", [u64p, sizep, ctypes.c_uint64])
        self.get = self._fn("cuIpcGetMemHandle", [ctypes.POINTER(_Handle), ctypes.c_uint64])
        self.open = self._fn("cuIpcOpenMemHandle_v2", [u64p, _Handle, ctypes.c_uint])
        self.close = self._fn("cuIpcCloseMemHandle", [ctypes.c_uint64])
        self.retain = self._fn("cuDevicePrimaryCtxRetain",
                               [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int])
        self.push = self._fn("cuCtxPushCurrent_v2", [ctypes.c_void_p])
        self.pop = self._fn("cuCtxPopCurrent_v2", [ctypes.POINTER(ctypes.c_void_p)])
        self.errstr = lib.cuGetErrorString
        self.errstr.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self.contexts: dict[int, ctypes.c_void_p] = {}
        self.check(self.init(0), "cuInit")

    def _fn(self, name: str, argtypes: list[Any]) -> Any:
        fn = getattr(self.lib, name, None)
        if fn is None:
            fn = getattr(self.lib, name.removesuffix("_v2"))
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
        return fn

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            text = ctypes.c_char_p()
            self.errstr(rc, ctypes.byref(text))
            reason = text.value.decode() if text.value else f"error {rc}"
            raise CudaError(f"{what} failed: {reason} (CUresult {rc})")

    def context(self, device: int) -> ctypes.c_void_p:
        ctx = self.contexts.get(device)
        if ctx is None:
            ctx = ctypes.c_void_p()
            self.check(self.retain(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
            self.contexts[device] = ctx
        return ctx

    def call(self, device: int, fn: Callable[[], int], what: str) -> None:
        """Run ``fn`` with ``device``'s primary context current on this thread."""
        self.check(self.push(self.context(device)), "cuCtxPushCurrent")
        try:
            self.check(fn(), what)
        finally:
            self.pop(ctypes.byref(ctypes.c_void_p()))


_driver: _Driver | None = None
_driver_lock = threading.Lock()


def _drv() -> _Driver:
    global _driver
    if _driver is None:
        with _driver_lock:
            if _driver is None:
                _driver = _Driver()
    return _driver


def _torch() -> Any:
    torch = sys.modules.get("torch")
    if torch is None:  # a CUDA tensor crossed our way: torch is installed
        torch = importlib.import_module("torch")
    return torch


def available() -> bool:
    """Whether this process can use CUDA memory (torch imported, a device present)."""
    torch = sys.modules.get("torch")
    try:
        return torch is not None and bool(torch.cuda.is_available())
    except Exception:
        return False


def status() -> str:
    """Why the CUDA paths can or cannot be used here, in one line (for the doctor)."""
    try:
        torch = _torch()
    except ImportError:
        return "no torch installed: CUDA paths not available"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device: CUDA paths not available"
    try:
        _drv()
    except (OSError, CudaError, AttributeError) as exc:
        return f"CUDA driver API not usable ({exc}): only staged copies through the host"
    n = torch.cuda.device_count()
    names = ", ".join(sorted({torch.cuda.get_device_name(i) for i in range(n)}))
    return f"{n} CUDA device(s) ({names}); driver API loaded"


class IpcExport:
    """A memory handle of the allocation holding a device range, and the range's offset."""

    __slots__ = ("handle", "offset")

    def __init__(self, handle: bytes, offset: int) -> None:
        self.handle, self.offset = handle, offset


def ipc_export(address: int, device: int) -> IpcExport:
    """The IPC handle of the allocation that holds ``address`` on ``device``.

    Raises:
        CudaError: the driver refused (e.g. memory from ``expandable_segments``).
    """
    d = _drv()
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    d.call(device, lambda: d.range(ctypes.byref(base), ctypes.byref(size), address),
           "cuMemGetAddressRange")
    handle = _Handle()
    d.call(device, lambda: d.get(ctypes.byref(handle), base.value), "cuIpcGetMemHandle")
    raw = ctypes.string_at(ctypes.addressof(handle), _HANDLE_BYTES)  # NULs included
    return IpcExport(raw, address - base.value)


class _Mappings:
    """Peers' allocations opened in this process: (owner, handle, device) -> base address.

    ``owner`` is the owner runtime's address: when it is found gone, its mappings are closed
    (:func:`forget_owner`), so the driver can free the dead process's memory."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: OrderedDict[tuple[str, bytes, int], int] = OrderedDict()

    def get(self, owner: str, handle: bytes, device: int) -> int:
        key = (owner, handle, device)
        with self.lock:
            base = self.open.get(key)
            if base is not None:
                self.open.move_to_end(key)
                return base
            d = _drv()
            ptr = ctypes.c_uint64()
            raw = _Handle()
            ctypes.memmove(ctypes.addressof(raw), handle, _HANDLE_BYTES)
            d.call(device, lambda: d.open(ctypes.byref(ptr), raw, _LAZY_PEER_ACCESS),
                   "cuIpcOpenMemHandle")
            self.open[key] = ptr.value
            while len(self.open) > _MAX_MAPPINGS:
                (_, _, dev), old = self.open.popitem(last=False)
                _close(d, dev, old)
            return ptr.value

    def forget_owner(self, owner: str) -> None:
        """Unmap every allocation of ``owner`` (it is gone, or its memory is)."""
        with self.lock:
            keys = [k for k in self.open if k[0] == owner]
            d = _drv()
            for key in keys:
                _close(d, key[2], self.open.pop(key))

    def count(self, owner: str | None = None) -> int:
        with self.lock:
            return sum(1 for key in self.open if owner is None or key[0] == owner)


def _close(d: _Driver, device: int, base: int) -> None:
    d.call(device, lambda: int(d.close(base)), "cuIpcCloseMemHandle")


_mappings = _Mappings()


def open_peer(owner: str, handle: bytes, offset: int, device: int) -> int:
    """The address, in this process, of ``offset`` into a peer's allocation (mapped once).

    ``owner``: the owner runtime's address (see :class:`_Mappings`)."""
    return _mappings.get(owner, handle, device) + offset


def forget_owner(owner: str) -> None:
    """Unmap a gone owner's allocations."""
    _mappings.forget_owner(owner)


def mapping_count(owner: str | None = None) -> int:
    """How many peers' allocations (of ``owner``, a runtime address, or of all) this
    process has mapped (for tests and reports)."""
    return _mappings.count(owner)


class _DeviceMemory:
    """Raw device bytes in the shape torch accepts through ``__cuda_array_interface__``."""

    def __init__(self, address: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (address, False), "version": 2}


def device_bytes(address: int, nbytes: int, device: int) -> Any:
    """A flat uint8 tensor over device memory (no copy; the caller keeps the memory alive)."""
    torch = _torch()
    return torch.as_tensor(_DeviceMemory(address, nbytes), device=f"cuda:{device}")


def host_bytes(view: memoryview) -> Any:
    """A flat uint8 CPU tensor over host memory (no copy)."""
    torch = _torch()
    if view.readonly:  # only ever read from: torch warns about read-only buffers
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.frombuffer(view, dtype=torch.uint8)
    return torch.frombuffer(view, dtype=torch.uint8)


_local = threading.local()


def _stream(device: int) -> Any:
    streams: dict[int, Any] | None = getattr(_local, "streams", None)
    if streams is None:
        streams = _local.streams = {}
    s = streams.get(device)
    if s is None:
        s = streams[device] = _torch().cuda.Stream(device=device)
    return s


def _ordered_stream(torch: Any, device: int) -> Any:
    """This thread's copy stream of ``device``, after the work queued on its current stream
    (a transfer sees everything the calling thread queued before it, e.g. a fill of the
    destination)."""
    s = _stream(device)
    s.wait_stream(torch.cuda.current_stream(device))
    return s


def copy_bytes(dst: Any, src: Any, device: int) -> None:
    """``dst.copy_(src)`` on this thread's stream of ``device``, finished on return."""
    torch = _torch()
    s = _ordered_stream(torch, device)
    with torch.cuda.stream(s):
        dst.copy_(src, non_blocking=True)
    s.synchronize()


def sync_device(device: int) -> None:
    """Wait for work queued on ``device``'s current stream (data written by kernels)."""
    _torch().cuda.current_stream(device).synchronize()


class _Staging:
    """Two pinned host buffers per thread, reused across transfers."""

    def __init__(self) -> None:
        torch = _torch()
        self.bufs = [torch.empty(STAGE_CHUNK, dtype=torch.uint8, pin_memory=True)
                     for _ in range(2)]
        self.events = [torch.cuda.Event(), torch.cuda.Event()]


def _staging() -> _Staging:
    st: _Staging | None = getattr(_local, "staging", None)
    if st is None:
        st = _local.staging = _Staging()
    return st


def staged(device_mem: Any, device: int, *, to_host: bool,
           io: Callable[[memoryview], None]) -> None:
    """Move ``device_mem`` (a flat uint8 CUDA tensor) through pinned host chunks.

    ``to_host``: copy each chunk device -> host, then ``io(chunk)`` (e.g. ``sendall``);
    the device copy of the next chunk runs while ``io`` handles this one. Otherwise ``io``
    fills each chunk (e.g. ``recv_into``) and it is copied host -> device, overlapping the
    next ``io``.
    """
    torch = _torch()
    st, s = _staging(), _ordered_stream(torch, device)
    n = int(device_mem.numel())
    spans = list(_chunks(n))
    if to_host:
        _stage_out(torch, st, s, device_mem, spans, io)
    else:
        _stage_in(torch, st, s, device_mem, spans, io)


def _chunks(n: int) -> Iterator[tuple[int, int]]:
    for lo in range(0, n, STAGE_CHUNK):
        yield lo, min(lo + STAGE_CHUNK, n)


def _pinned_view(buf: Any, n: int) -> memoryview:
    return memoryview((ctypes.c_char * n).from_address(int(buf.data_ptr()))).cast("B")


def _stage_out(torch: Any, st: _Staging, s: Any, mem: Any, spans: list[tuple[int, int]],
               io: Callable[[memoryview], None]) -> None:
    def launch(i: int) -> None:
        lo, hi = spans[i]
        with torch.cuda.stream(s):
            st.bufs[i % 2][: hi - lo].copy_(mem[lo:hi], non_blocking=True)
            st.events[i % 2].record(s)

    if spans:
        launch(0)
    for i, (lo, hi) in enumerate(spans):
        if i + 1 < len(spans):
            launch(i + 1)
        st.events[i % 2].synchronize()
        io(_pinned_view(st.bufs[i % 2], hi - lo))


def _stage_in(torch: Any, st: _Staging, s: Any, mem: Any, spans: list[tuple[int, int]],
              io: Callable[[memoryview], None]) -> None:
    for i, (lo, hi) in enumerate(spans):
        if i >= 2:
            st.events[i % 2].synchronize()  # the copy out of this buffer two chunks ago
        io(_pinned_view(st.bufs[i % 2], hi - lo))
        with torch.cuda.stream(s):
            mem[lo:hi].copy_(st.bufs[i % 2][: hi - lo], non_blocking=True)
            st.events[i % 2].record(s)
    s.synchronize()
