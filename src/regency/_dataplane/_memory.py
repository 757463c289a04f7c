"""Memory the data plane can address: what a buffer registers and what a transfer fills.

Every supported object becomes a :class:`Region`: a start address, a length in bytes, a
read-only flag and the object that keeps the memory alive. Two sets of rules apply:

* :func:`buffer_region` (``RDMABuffer(obj)``), as in Monarch: a 1-D contiguous torch tensor (CPU
  or CUDA) or
  numpy array, a ``bytearray``, or a 1-D contiguous memoryview (or any other 1-D contiguous
  buffer-protocol object, such as ``mmap``). Size 0, more than one dimension and strides are
  ``ValueError``. Read-only memory (``bytes``, a read-only view) is accepted and makes a
  read-only buffer: ``write_from`` into it is refused.
* :func:`local_region` (the ``dst`` of ``read_into``, the ``src`` of ``write_from``): any
  contiguous tensor, array or buffer-protocol object, of any shape; ``dst`` must be writable.

Torch is optional: it is looked up in ``sys.modules`` only, never imported here.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any

from .._transport._memaddr import address_of

__all__ = ["Region", "buffer_region", "flat_bytes", "is_numpy_array", "is_torch_tensor",
           "local_region"]


@dataclass(frozen=True)
class Region:
    """A contiguous range of this process's memory, kept alive by ``keep``."""

    address: int
    nbytes: int
    readonly: bool
    keep: Any
    kind: str  # "torch", "cuda", "numpy", "bytearray", "memoryview", "bytes", ...
    dtype: str = "uint8"
    device: int = -1  # the CUDA device index of device memory; -1: host memory

    @property
    def on_device(self) -> bool:
        """Whether this is CUDA device memory (no host pointer: copies go through torch)."""
        return self.device >= 0

    def view(self) -> memoryview:
        """The bytes as a flat memoryview (for socket I/O); keep ``self`` alive meanwhile."""
        if self.on_device:
            raise ValueError("CUDA device memory has no host view; stage it through the host")
        if self.nbytes == 0:
            return memoryview(b"")
        mv = memoryview((ctypes.c_char * self.nbytes).from_address(self.address)).cast("B")
        return mv.toreadonly() if self.readonly else mv


def is_torch_tensor(obj: Any) -> bool:
    """Whether ``obj`` is a torch tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def is_numpy_array(obj: Any) -> bool:
    """Whether ``obj`` is a numpy array (without importing numpy)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.ndarray)


def flat_bytes(obj: Any) -> Any:
    """A contiguous torch tensor's or numpy array's memory as a 1-D view of bytes (no copy)."""
    if is_torch_tensor(obj):
        return obj.reshape(-1).view(sys.modules["torch"].uint8)
    return obj.reshape(-1).view("uint8")


def _torch_region(t: Any, what: str, need_1d: bool) -> Region:
    dev = t.device.type
    if dev not in ("cpu", "cuda"):
        raise ValueError(f"{what}: tensors on device {dev!r} are not supported; pass a CPU "
                         "or CUDA tensor (t.to('cpu') or t.to('cuda'))")
    if need_1d and t.dim() != 1:
        raise ValueError(f"{what}: the tensor must be 1-D, got shape {tuple(t.shape)}; "
                         "view it as bytes with t.view(torch.uint8).flatten()")
    if not t.is_contiguous():
        raise ValueError(f"{what}: the tensor must be contiguous (strides {t.stride()}); "
                         "call .contiguous() first")
    dtype = str(t.dtype).removeprefix("torch.")
    nbytes = int(t.numel() * t.element_size())
    if dev == "cuda":
        return Region(int(t.data_ptr()), nbytes, False, t, "cuda", dtype, int(t.device.index))
    return Region(int(t.data_ptr()), nbytes, False, t, "torch", dtype)


def _array_region(a: Any, what: str, need_1d: bool) -> Region:
    if need_1d and a.ndim != 1:
        raise ValueError(f"{what}: the array must be 1-D, got shape {a.shape}; "
                         "view it as bytes with a.reshape(-1).view(numpy.uint8)")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what}: the array must be C-contiguous (strides {a.strides}); "
                         "use numpy.ascontiguousarray first")
    return Region(int(a.ctypes.data), int(a.nbytes), not a.flags.writeable, a, "numpy",
                  str(a.dtype))


def _bytes_region(obj: Any, what: str, need_1d: bool) -> Region:
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(
            f"{what}: expected a torch.Tensor, numpy.ndarray, bytearray or memoryview "
            f"(any contiguous buffer), got {type(obj).__name__}") from None
    if need_1d and mv.ndim > 1:
        raise ValueError(f"{what}: the memoryview must be 1-D, got shape {mv.shape}; "
                         "use .cast('B') first")
    if not mv.c_contiguous:
        raise ValueError(f"{what}: the memory must be C-contiguous (strides {mv.strides})")
    addr = address_of(mv) if mv.nbytes else 0
    kind = type(obj).__name__
    return Region(addr, mv.nbytes, mv.readonly, mv, kind)


def _region(obj: Any, what: str, need_1d: bool) -> Region:
    if is_torch_tensor(obj):
        return _torch_region(obj, what, need_1d)
    if is_numpy_array(obj):
        return _array_region(obj, what, need_1d)
    return _bytes_region(obj, what, need_1d)


def buffer_region(obj: Any) -> Region:
    """The memory ``RDMABuffer(obj)`` registers, checked by Monarch's rules."""
    region = _region(obj, "RDMABuffer", need_1d=True)
    if region.nbytes == 0:
        raise ValueError("RDMABuffer: cannot register an empty buffer (size 0)")
    return region


def local_region(obj: Any, *, writable: bool, what: str) -> Region:
    """The local side of a transfer (``dst`` when ``writable``, else ``src``)."""
    region = _region(obj, what, need_1d=False)
    if writable and region.readonly:
        raise ValueError(f"{what}: the destination is read-only ({region.kind}); "
                         "pass writable memory (bytearray, writable array or tensor)")
    return region
