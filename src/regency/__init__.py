"""regency: single-controller distributed programming in pure Python.

One ordinary Python script (the controller) spawns meshes of processes and actors and drives
them as if programming one machine. The API follows ``monarch.actor`` name for name; see
:mod:`regency.actor`.
"""

# ruff: noqa: E402  (the compiled hot path is chosen before anything else is imported)
from __future__ import annotations

import logging as _logging

from . import _accel

_accel.install()  # before any hot-path module is imported (see regency._accel)

from ._api._mast import mast_reserve
from ._mesh import NDSlice, Selection, Shape
from ._version import __version__
from .actor import (
    Accumulator,
    Actor,
    ActorError,
    ActorMesh,
    Channel,
    Extent,
    Future,
    HostMesh,
    MeshFailure,
    Point,
    Port,
    PortReceiver,
    ProcMesh,
    SupervisionError,
    ValueMesh,
    as_endpoint,
    concurrent_endpoint,
    context,
    current_rank,
    current_size,
    endpoint,
    get_or_spawn_controller,
    send,
    shutdown_context,
    this_host,
    this_proc,
)
from .config import (
    clear_runtime_config,
    configure,
    configured,
    get_global_config,
    get_runtime_config,
)

_logging.getLogger("regency").addHandler(_logging.NullHandler())

#: The tensor engine's names (``monarch`` exports them at its top level); they import torch,
#: so they load on first access and ``import regency`` alone never imports torch.
_TENSOR_NAMES = frozenset({
    "OpaqueRef", "RemoteException", "RemoteProcessGroup", "Simulator", "Stream", "Tensor",
    "call_on_shard_and_fetch", "coalescing", "fetch_shard", "function_resolvers",
    "get_active_mesh", "get_active_stream", "inspect", "no_mesh", "reduce", "reduce_",
    "remote", "set_meta", "show", "slice_mesh", "to_mesh", "world_mesh",
})


def __getattr__(name: str) -> object:
    if name in _TENSOR_NAMES:
        import importlib

        return getattr(importlib.import_module("regency._tensor.api"), name)
    raise AttributeError(f"module 'regency' has no attribute {name!r}")

__all__ = [
    "Accumulator",
    "Actor",
    "ActorError",
    "ActorMesh",
    "Channel",
    "Extent",
    "Future",
    "HostMesh",
    "MeshFailure",
    "Point",
    "Port",
    "PortReceiver",
    "ProcMesh",
    "SupervisionError",
    "ValueMesh",
    "NDSlice",
    "Selection",
    "Shape",
    "__version__",
    "as_endpoint",
    "clear_runtime_config",
    "concurrent_endpoint",
    "configure",
    "configured",
    "context",
    "current_rank",
    "current_size",
    "endpoint",
    "get_global_config",
    "get_or_spawn_controller",
    "get_runtime_config",
    "mast_reserve",
    "send",
    "shutdown_context",
    "this_host",
    "this_proc",
]
