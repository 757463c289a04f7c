"""CUDA tensors in messages: lent by the sender, taken by each receiver, never via the host.

Theory of operation
-------------------
Pickling a CUDA tensor (an endpoint argument or result) does not copy its bytes. The sender
waits for the kernels queued on the tensor's device (so the bytes are final), registers the
tensor's memory with its data plane as a *lend* for ``takers`` receivers (the members a
call goes to; one for a result), and pickles the lend's descriptor with the tensor's dtype,
shape and strides. The registration keeps the tensor alive in the sender, however soon the
sender's code lets go of it.

Unpickling *takes* the lend: the receiver allocates a tensor of the same dtype, shape and
strides on its own current CUDA device (the CPU where it has none) and reads the bytes into
it one-sidedly, with the transport the pair allows: on one host the sender's allocation is
mapped with CUDA IPC and copied on the GPU (``cuda_ipc``); across hosts the bytes stream
through pinned host memory on both sides (``tcp``). Then it tells the sender it is done
(``rdma_taken``); after the last taker the sender drops the lend, and its memory goes back to
the sender's caching allocator. What the receiver gets is its own: later writes on either
side are not seen by the other.

A lend whose takers never come (a receiver died before the message reached it) is dropped
after ``REGENCY_CUDA_LEND_TTL`` seconds (default 600), so a sender cannot leak GPU memory
forever; a taker later than that gets ``BufferDroppedError``.

Tensors that are not non-overlapping and dense (a strided slice, an expanded view) are made
contiguous on the sender first (one copy on its GPU); the receiver then gets contiguous
strides.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .._api._bootstrap import runtime
from .._wire._messages import RdmaTaken
from ._buffer import register
from ._cuda import sync_device
from ._handle import Descriptor
from ._identity import peer_info
from ._memory import Region
from ._owner import watch_deaths
from ._registry import registry
from ._transfer import READ, run_now

__all__ = ["reduce_cuda_tensor"]

_TAKE_TIMEOUT = 120.0


def _ttl() -> float:
    try:
        return max(1.0, float(os.environ.get("REGENCY_CUDA_LEND_TTL", "600")))
    except ValueError:
        return 600.0


def _dense(t: Any) -> bool:
    """Whether ``t`` covers exactly ``numel`` elements from its first (non-overlapping,
    dense, non-negative strides): then its bytes are one contiguous range."""
    dims = sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def reduce_cuda_tensor(t: Any, takers: int, parameter: bool,
                       undo: list[Callable[[], None]] | None = None) -> tuple[Any, ...]:
    """The pickle reduction of CUDA tensor ``t`` sent to ``takers`` receivers.

    ``undo``: where to leave a way to take the lend back (if the pickle is thrown away)."""
    src = t.detach()
    if not _dense(src):
        src = src.contiguous()
    meta = (str(src.dtype).removeprefix("torch."), tuple(src.shape), tuple(src.stride()),
            bool(t.requires_grad), parameter)
    nbytes = int(src.numel() * src.element_size())
    if nbytes == 0:
        return _rebuild, (None, meta)
    device = int(src.device.index)
    sync_device(device)  # the bytes must be final before anyone reads them
    region = Region(int(src.data_ptr()), nbytes, False, src, "cuda", meta[0], device)
    desc = register(region, max(1, takers))
    _expire_later(desc)
    if undo is not None:
        undo.append(lambda: _drop(desc))
    return _rebuild, (desc, meta)


def _drop(desc: Descriptor) -> None:
    registry().drop(desc.reg_id, desc.key)


def _expire_later(desc: Descriptor) -> None:
    rt = runtime()
    reg_id, key = desc.reg_id, desc.key

    def arm() -> None:
        rt.loop.call_later(_ttl(), lambda: registry().drop(reg_id, key))

    rt.loop.call_soon_threadsafe(arm)


def _rebuild(desc: Descriptor | None, meta: tuple[Any, ...]) -> Any:
    import torch

    dtype_name, shape, stride, requires_grad, parameter = meta
    dtype = getattr(torch, dtype_name)
    device = (torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available()
              else torch.device("cpu"))
    out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
    if desc is not None:
        _take(desc, out)
    if parameter:
        return torch.nn.Parameter(out, requires_grad=requires_grad)
    return out.requires_grad_(True) if requires_grad else out


def _take(desc: Descriptor, out: Any) -> None:
    rt = runtime()
    watch_deaths(rt)
    index = out.device.index if out.device.type == "cuda" else -1
    kind = "cuda" if index >= 0 else "torch"
    local = Region(int(out.data_ptr()), desc.size, False, out, kind, desc.dtype, index)
    try:
        run_now(READ, desc, local, timeout=_TAKE_TIMEOUT, secret=rt.secret,
                dead=lambda: rt.dead_addrs.get(desc.control))
    finally:
        _release(desc)


def _release(desc: Descriptor) -> None:
    """Tell the lender this taker is done (whether or not the take worked)."""
    if desc.owner.same_process(peer_info()):
        registry().taken(desc.reg_id, desc.key)
        return
    rt = runtime()
    if rt.dead_addrs.get(desc.control) is None:
        rt.send_sys(desc.control, RdmaTaken(desc.reg_id, desc.key))
