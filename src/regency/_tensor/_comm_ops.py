"""Worker-side collectives over gloo (or NCCL) process groups split by mesh dims.

gloo has all_reduce and all_gather; reduce-scatter and all-to-all are built from them. A
CUDA tensor is reduced by NCCL when its group has NCCL (every member on a device of its
own), except the bitwise reductions NCCL lacks; otherwise it is staged through CPU memory
and reduced by gloo.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

__all__ = ["NCCL_GROUPS", "nccl_group_count", "reduce"]

#: ids of this proc's groups that run CUDA collectives on NCCL (filled by the worker)
NCCL_GROUPS: set[int] = set()

_OPS = {"sum": "SUM", "avg": "SUM", "product": "PRODUCT", "min": "MIN", "max": "MAX",
        "band": "BAND", "bor": "BOR", "bxor": "BXOR"}

def nccl_group_count() -> int:
    """How many of this proc's groups run CUDA collectives on NCCL (a ``remote`` function
    for tests and benchmarks: which backend was chosen)."""
    return len(NCCL_GROUPS)


#: reductions NCCL lacks: run by gloo on CPU copies even in an NCCL group
_NOT_NCCL = frozenset({"band", "bor", "bxor"})


def reduce(t: torch.Tensor, group: Any, reduction: str, scatter: bool,
           inplace: bool) -> torch.Tensor | None:
    """This rank's share of reducing ``t`` over ``group`` (see ``regency.reduce``)."""
    if t.is_cuda and (id(group) not in NCCL_GROUPS or reduction in _NOT_NCCL):
        out = _reduce(t.cpu(), group, reduction, scatter, False)
        assert out is not None  # not in place: a value
        if inplace:
            t.copy_(out)
            return None
        return out.to(t.device)
    return _reduce(t, group, reduction, scatter, inplace)


def _reduce(t: torch.Tensor, group: Any, reduction: str, scatter: bool,
            inplace: bool) -> torch.Tensor | None:
    n = dist.get_world_size(group)
    me = dist.get_rank(group)
    if reduction == "stack":
        parts = [torch.empty_like(t) for _ in range(n)]
        dist.all_gather(parts, t.contiguous(), group=group)
        if scatter:  # all-to-all: slot j of the result is slot `me` of rank j's input
            return torch.stack([p[me] for p in parts])
        return torch.stack(parts)
    op = getattr(dist.ReduceOp, _OPS[reduction])
    if inplace and t.is_contiguous():  # no copy: the collective writes the tensor itself
        dist.all_reduce(t, op=op, group=group)
        if reduction == "avg":
            t.div_(n) if t.is_floating_point() else t.floor_divide_(n)
        return None
    buf = t.contiguous().clone()
    dist.all_reduce(buf, op=op, group=group)
    if reduction == "avg":
        buf = buf / n if buf.is_floating_point() else buf // n
    if scatter:
        return buf[me].clone()
    if inplace:
        t.copy_(buf)
        return None
    return buf
