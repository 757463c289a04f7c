"""Collectives that never leave a rank waiting for one whose input failed (worker side).

Every rank of a group must enter each of its collectives, or the others wait for ever. A rank
whose input holds the error of an earlier op (:class:`WorkerError`: the op raised on that
rank alone, say) cannot compute, yet must not stay away. So:

* :func:`agree` is one small all-reduce over the group: did any rank's input fail? If one
  did, every rank gets the first such rank's error (broadcast only then) and stores it, so
  the fetch of the result raises that error on every rank of the group.
* A ``remote`` function given a process group runs only after :func:`agree` (the worker
  calls it before the function); with an error, no rank runs it.
* :func:`reduce` (what ``regency.reduce`` runs) avoids that extra round trip in the common
  case: a rank with a failed input joins the collective with a placeholder of the input's
  shape filled with a value the reduction cannot hide (NaN for a float sum, the least integer
  for ``min``, ...), so the result shows it on every rank at element 0. Only a result that
  shows it (a real NaN there, too) costs the :func:`agree` round, which tells the two apart.
  Reductions without such a value (integer sums, scatter, CUDA tensors) always agree.
"""

from __future__ import annotations

import math
import pickle
from typing import Any

import torch
import torch.distributed as dist

from . import _comm_ops
from ._messages import WorkerError

__all__ = ["InputFailed", "agree", "reduce"]


class InputFailed(Exception):
    """An input of the op holds an error (here, or on another rank of its group)."""

    def __init__(self, error: WorkerError) -> None:
        self.error = error


def agree(group: Any, error: WorkerError | None) -> WorkerError | None:
    """Over ``group`` (``None``: the world), the error of the first rank that holds one in
    its inputs (``error`` is this rank's), or None when none does. Every rank of the group
    must call it at the same point of its stream."""
    size = dist.get_world_size(group)
    if size == 1:
        return error
    me = dist.get_rank(group)
    first = torch.tensor([me if error is not None else size], dtype=torch.int64)
    dist.all_reduce(first, op=dist.ReduceOp.MIN, group=group)
    src = int(first[0])
    if src == size:
        return None
    root = src if group is None else dist.get_global_rank(group, src)
    if src == me:
        data = torch.frombuffer(bytearray(pickle.dumps(error)), dtype=torch.uint8)
        length = torch.tensor([data.numel()], dtype=torch.int64)
    else:
        length = torch.zeros(1, dtype=torch.int64)
    dist.broadcast(length, src=root, group=group)
    if src != me:
        data = torch.empty(int(length[0]), dtype=torch.uint8)
    dist.broadcast(data, src=root, group=group)
    return error if src == me else pickle.loads(data.numpy().tobytes())  # type: ignore[no-any-return,unused-ignore]


def reduce(t: torch.Tensor | WorkerError, group: Any, reduction: str, scatter: bool,
           inplace: bool, like: tuple[tuple[int, ...], torch.dtype, str]) -> Any:
    """``_comm_ops.reduce`` that every rank of the group joins, even one whose input ``t``
    failed (a ``WorkerError`` here; ``like`` is the input's shape, dtype and device type).

    Raises:
        InputFailed: the input failed on some rank of the group (every rank raises it).
    """
    error = t if type(t) is WorkerError else None
    if error is not None:
        t = _placeholder(like, reduction)
    assert isinstance(t, torch.Tensor)
    out = _comm_ops.reduce(t, group, reduction, scatter, inplace)
    result = t if out is None else out
    if error is not None or _may_hide_an_error(result, reduction, scatter):
        first = agree(group, error)
        if first is not None:
            raise InputFailed(first)
    return out


def _sentinel(reduction: str, dtype: torch.dtype) -> float | int | complex | None:
    """The value a rank with a failed input sends: whatever the others send, the result
    holds it (or NaN) at element 0 (at element 0 of each rank's part, for ``stack``)."""
    if dtype.is_complex:
        return complex(math.nan, math.nan) if reduction in ("sum", "avg", "product",
                                                            "stack") else None
    if dtype.is_floating_point:
        return {"sum": math.nan, "avg": math.nan, "product": math.nan, "stack": math.nan,
                "min": -math.inf, "max": math.inf}.get(reduction)
    if dtype == torch.bool:
        return None
    info = torch.iinfo(dtype)
    return {"min": info.min, "max": info.max, "product": 0, "band": 0, "stack": info.min,
            "bor": -1 if info.min < 0 else info.max}.get(reduction)


def _placeholder(like: tuple[tuple[int, ...], torch.dtype, str], reduction: str) -> torch.Tensor:
    shape, dtype, device = like
    value = _sentinel(reduction, dtype)
    return torch.full(shape, 0 if value is None else value, dtype=dtype,
                      device=torch.device(device))  # "cuda": this worker's current device


def _may_hide_an_error(result: torch.Tensor, reduction: str, scatter: bool) -> bool:
    """Whether ``result`` may hold a failed rank's placeholder. Decided alike on every rank
    (from data every rank has: so no scatter, whose slices differ), else every rank would
    not call :func:`agree` together."""
    if scatter or result.is_cuda or result.numel() == 0:
        return True
    value = _sentinel(reduction, result.dtype)
    if value is None:
        return True
    if reduction == "stack":  # element 0 of each rank's part
        heads = result[(slice(None),) + (0,) * (result.dim() - 1)]
        hit = heads == value
        if result.dtype.is_floating_point or result.dtype.is_complex:
            hit |= heads.isnan()
        return bool(hit.any())
    head = result[(0,) * result.dim()].item()
    return head != head or head == value  # NaN, or the placeholder's value
