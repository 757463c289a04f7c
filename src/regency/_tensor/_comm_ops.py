"""Worker-side collectives over gloo (or NCCL) process groups split by mesh dims.

gloo has all_reduce and all_gather; reduce-scatter and all-to-all are built from them.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

__all__ = ["reduce"]

_OPS = {"sum": "SUM", "avg": "SUM", "product": "PRODUCT", "min": "MIN", "max": "MAX",
        "band": "BAND", "bor": "BOR", "bxor": "BXOR"}


def reduce(t: torch.Tensor, group: Any, reduction: str, scatter: bool,
           inplace: bool) -> torch.Tensor | None:
    """This rank's share of reducing ``t`` over ``group`` (see ``regency.reduce``)."""
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
