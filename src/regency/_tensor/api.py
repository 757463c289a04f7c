"""The tensor engine's public names (imports torch); reached as ``regency.<name>``."""

from __future__ import annotations

from typing import Any

from . import _actors
from . import _dispatch as _dispatch  # installs the dispatch mode hooks
from ._active import Stream, get_active_mesh, get_active_stream, no_mesh
from ._collectives import RemoteProcessGroup, process_group, reduce, reduce_
from ._errors import RemoteException
from ._extras import OpaqueRef, Simulator, function_resolvers, set_meta, show, world_mesh
from ._fetch import fetch_shard, inspect, rank_tensor
from ._mesh import DeviceMesh, coalescing, device_mesh_of
from ._remote import Remote, call_on_shard_and_fetch, remote
from ._tensor import Tensor
from ._transfer import slice_mesh, to_mesh

_actors.install()  # remote tensors in endpoint calls, endpoint.rref()

__all__ = [
    "DeviceMesh", "OpaqueRef", "Remote", "RemoteException", "RemoteProcessGroup",
    "Simulator", "Stream", "Tensor", "activate", "call_on_shard_and_fetch", "coalescing",
    "fetch_shard", "function_resolvers", "get_active_mesh", "get_active_stream", "inspect",
    "no_mesh", "process_group", "rank_tensor", "rank_tensors", "reduce", "reduce_",
    "remote", "set_meta", "show", "slice_mesh", "to_mesh", "world_mesh",
]


def activate(procs: Any) -> Any:
    """``procs.activate()``: torch ops inside run on every rank of ``procs``."""
    return device_mesh_of(procs).activate()


def rank_tensors(procs: Any) -> dict[str, Tensor]:
    """``procs.rank_tensors()``: the rank tensor of every dim, by dim name."""
    mesh = device_mesh_of(procs)
    return {d: rank_tensor(mesh, d) for d in mesh.labels}
