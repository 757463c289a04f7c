"""``fetch_shard``, ``inspect``, and ``rank_tensor``: values out of and coordinates into a mesh."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map

from .._api._future import Future, completed
from ._dispatch import fake_only, issue_python
from ._errors import bad_arguments
from ._messages import RankRef, Ref
from ._tensor import Tensor

__all__ = ["fetch_shard", "inspect", "rank_tensor"]


def fetch_shard(obj: Any, shard: dict[str, int] | None = None, **coords: int) -> Future[Any]:
    """A Future of ``obj`` (a pytree of remote tensors) as local values on one rank.

    With no coordinates it reads the first rank of the mesh; otherwise every mesh dim must be
    given (``fetch_shard(t, hosts=0, gpus=1)``). The Future raises ``RemoteException`` if an
    op the value depends on failed on that rank, and ``SupervisionError`` if the proc died.

    Raises:
        ValueError: a dim is missing, unknown or out of range.
        TypeError: the tensors live on different meshes, or one was dropped.
    """
    where = dict(shard or {}, **coords)
    tensors = [t for t in tree_leaves(obj) if isinstance(t, Tensor)]
    if not tensors:
        return completed(obj)
    mesh = tensors[0]._mesh
    problems = [(f"tensor {i}", "WRONG_MESH") for i, t in enumerate(tensors) if t._mesh is not mesh]
    problems += [(f"tensor {i}", "DROPPED") for i, t in enumerate(tensors) if t._dropped]
    problems += [(f"tensor {i}", "BORROWED") for i, t in enumerate(tensors)
                 if t._access is not None and "r" not in t._access.mode]
    if problems:
        raise bad_arguments("fetch_shard", problems)
    if where:
        mesh.rank_of(where)  # validates
    else:
        where = dict.fromkeys(mesh.labels, 0) if mesh.labels else {}
    tree = tree_map(lambda t: Ref(t._ref) if isinstance(t, Tensor) else t, obj)
    return mesh.fetch(tree, where)  # type: ignore[no-any-return,unused-ignore]


def inspect(obj: Any, shard: dict[str, int] | None = None, **coords: int) -> Any:
    """``fetch_shard(obj, shard, **coords).result()``: blocks for the value."""
    return fetch_shard(obj, shard, **coords).result()


def rank_tensor(device_mesh: Any, dims: str | tuple[str, ...] | list[str] = ()) -> Tensor:
    """A 0-d int64 remote tensor holding each rank's coordinate along ``dims`` (their
    row-major combined rank for several dims; all dims when empty)."""
    names = (dims,) if isinstance(dims, str) else tuple(dims)
    unknown = [d for d in names if d not in device_mesh.sizes]
    if unknown:
        raise ValueError(f"rank_tensor over {unknown}: not dims of the mesh "
                         f"{device_mesh.labels}")
    with fake_only():
        out = torch.empty((), dtype=torch.int64)
    spec = "py:regency._tensor._worker:rank_value"
    return issue_python(device_mesh, spec, spec, (RankRef(names),), {}, out)  # type: ignore[no-any-return,unused-ignore]
