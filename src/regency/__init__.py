"""regency: single-controller distributed programming in pure Python.

One ordinary Python script (the controller) spawns meshes of processes and actors and drives
them as if programming one machine. The API follows ``monarch.actor`` name for name; see
:mod:`regency.actor`.
"""

from __future__ import annotations

import logging as _logging

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
