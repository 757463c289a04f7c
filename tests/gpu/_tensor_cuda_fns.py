"""Remote functions for the CUDA tensor-engine tests (importable, so workers load them by
reference). Torch is imported inside them: importing this module imports nothing."""

from __future__ import annotations

from typing import Any


def device_of(t: Any) -> str:
    """Where the worker's local tensor is: ``"cuda:0"``."""
    return str(t.device)


def current_device() -> str:
    """The worker thread's current CUDA device."""
    import torch

    return f"cuda:{torch.cuda.current_device()}"


def nccl_groups() -> int:
    """How many of this proc's tensor-engine groups run CUDA collectives on NCCL."""
    from regency._tensor import _comm_ops

    return len(_comm_ops.NCCL_GROUPS)


def all_sum(t: Any, group: Any) -> Any:
    """``t`` all-reduced (sum) over ``group`` by plain torch.distributed."""
    import torch.distributed as dist

    out = t.clone()
    dist.all_reduce(out, group=group)
    return out


def bad_matmul(t: Any) -> Any:
    """``t @ t``: fails on the worker for a non-square ``t`` (the propagator says it works)."""
    return t @ t
