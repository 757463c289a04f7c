"""``reduce``/``reduce_`` over named mesh dims, and ``process_group``: the controller side.

A reduction is an op of the stream like any other: its worker function
(``_agreement.reduce`` around ``_comm_ops.reduce``) runs the collective on the worker's group for
the reduced dims, joined by every rank even where the input failed.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_map

from ._dispatch import fake_of, fake_only, issue_python
from ._errors import NotADim
from ._mesh import _coalescing
from ._messages import GroupRef
from ._tensor import Tensor

__all__ = ["RemoteProcessGroup", "process_group", "reduce", "reduce_", "reduce_tensor"]

REDUCTIONS = ("stack", "sum", "avg", "product", "min", "max", "band", "bor", "bxor")
_SPEC = "py:regency._tensor._agreement:reduce"  # _comm_ops.reduce, joined by every rank


def _dims(mesh: Any, dims: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    got = (dims,) if isinstance(dims, str) else tuple(dims)
    unknown = [d for d in got if d not in mesh.sizes]
    if unknown:
        raise NotADim(f"reduce over {unknown}: not dims of the mesh {mesh.labels}")
    return tuple(d for d in mesh.labels if d in got) if got else mesh.labels


def reduce_tensor(t: Tensor, dims: str | tuple[str, ...], reduction: str, scatter: bool,
                  mesh: Any, out: Any, inplace: bool) -> Tensor:
    """Issue one reduction of ``t`` on its mesh (see :func:`reduce`)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction {reduction!r} is not one of {REDUCTIONS}")
    if mesh is not None or out is not None:
        raise NotImplementedError("reduce(mesh=...) and reduce(out=...) are not supported yet")
    if not isinstance(t, Tensor):
        raise TypeError(f"reduce of {type(t).__name__}: only remote tensors can be reduced")
    if t.requires_grad:
        raise TypeError("reduce: the tensor requires grad; reduce its .detach() (collectives "
                        "are not differentiated)")
    dm = t._mesh
    names = _dims(dm, dims)
    size = 1
    for d in names:
        size *= dm.sizes[d]
    if len(names) > 1 and (reduction == "stack" or scatter):
        raise ValueError("reducing over several dims is only allowed without 'stack' and "
                         "without scatter=True")
    if inplace and (scatter or reduction == "stack"):
        raise ValueError("reduce_ (in place) needs scatter=False and a reduction other than "
                         "'stack': the result's shape differs from the input's")
    shape = tuple(t.shape)
    if scatter and (not shape or shape[0] != size):
        raise ValueError(f"reduce(scatter=True) over {names}: the tensor's dim 0 must be "
                         f"{size} (the size of those dims), got shape {shape}")
    dm.ensure_comms()
    fake = fake_of(t)
    with fake_only():
        if reduction == "stack":
            result = torch.empty_like(fake) if scatter else torch.stack([fake] * size)
        else:
            result = torch.empty_like(fake[0] if scatter else fake,
                                      memory_format=torch.contiguous_format)
    like = (shape, fake.dtype, fake.device.type)  # a rank whose t failed sends one alike
    args = (t, GroupRef(names), reduction, scatter, inplace, like)
    if inplace:
        issue_python(dm, _SPEC, _SPEC, args, {}, None, mutates=[t])
        out = t
    else:
        out = issue_python(dm, _SPEC, _SPEC, args, {}, result)
    if not _coalescing[0]:
        dm.flush()  # a collective is slow and waits for every rank: start it at once, not
        # when the batch fills (the workers run it while the controller issues what follows)
    return out  # type: ignore[no-any-return,unused-ignore]


def reduce(tensors: Any, dims: str | tuple[str, ...] = (), reduction: str = "sum",
           scatter: bool = False, mesh: Any = None) -> Any:
    """Reduce every remote tensor of a pytree over the mesh dims ``dims`` (all when empty).

    ``reduction`` is one of ``stack`` (all-gather: a new dim 0 of the dims' size), ``sum``,
    ``avg``, ``product``, ``min``, ``max``, ``band``, ``bor``, ``bxor`` (all-reduce: every
    member gets the result). ``scatter=True`` gives reduce-scatter (dim 0 must equal the
    dims' size; each member keeps its slice) or, with ``stack``, all-to-all. CPU tensors
    go through torch.distributed gloo groups; CUDA tensors through NCCL when every member of
    the group has a GPU of its own, else (ranks sharing a GPU) staged through CPU and gloo.
    """
    return tree_map(lambda t: reduce_tensor(t, dims, reduction, scatter, mesh, None, False)
                    if isinstance(t, Tensor) else t, tensors)


def reduce_(tensors: Any, dims: str | tuple[str, ...] = (), reduction: str = "sum",
            scatter: bool = False, mesh: Any = None) -> Any:
    """In-place :func:`reduce` (``scatter=False`` only); returns its input."""
    return tree_map(lambda t: reduce_tensor(t, dims, reduction, scatter, mesh, None, True)
                    if isinstance(t, Tensor) else t, tensors)


class RemoteProcessGroup(GroupRef):
    """The controller's handle to the torch.distributed group of each worker over mesh
    dims (``procs.process_group(dims)``): passed to a ``remote`` function, it is that
    worker's own ``ProcessGroup`` (gloo on CPU). Workers make the group on first use, the
    same on every rank, and keep it while the mesh lives."""

    __slots__ = ("device_mesh", "ref")

    def __init__(self, dims: tuple[str, ...], device_mesh: Any) -> None:
        super().__init__(dims)
        self.device_mesh = device_mesh
        self.ref: int | None = 0

    def size(self) -> int:
        """How many ranks each group has (the product of its dims' sizes)."""
        n = 1
        for d in self.dims:
            n *= self.device_mesh.sizes[d]
        return n

    def ensure_split_comm_remotely(self, stream: Any = None) -> None:
        """Accepted for Monarch code: each worker makes its group when an op first uses it,
        in stream order, so there is nothing to do ahead."""

    def drop(self) -> None:
        """Mark the handle dropped (the workers keep the group: groups are made once per
        mesh and reused by every handle to the same dims)."""
        self.ref = None

    def delete_ref(self, ref: int) -> None:
        """Accepted for Monarch code; see :meth:`drop`."""
        self.ref = None

    @property
    def dropped(self) -> bool:
        """Whether :meth:`drop` was called."""
        return self.ref is None

    def __repr__(self) -> str:
        return f"RemoteProcessGroup(dims={self.dims}, mesh={self.device_mesh!r})"


def process_group(device_mesh: Any, dims: str | tuple[str, ...]) -> RemoteProcessGroup:
    """The torch.distributed group over ``dims``: pass it to a ``remote`` function, where it
    is the worker's own ``ProcessGroup``: gloo for CPU tensors and NCCL for CUDA tensors
    when every member has a GPU of its own; gloo alone (which takes CUDA tensors for
    all_reduce, broadcast and all_gather) when members share a GPU."""
    names = _dims(device_mesh, dims)
    device_mesh.ensure_comms()
    return RemoteProcessGroup(names, device_mesh)
