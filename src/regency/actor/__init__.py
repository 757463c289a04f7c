"""The actor API, name for name with ``monarch.actor``.

A Monarch program ports by changing ``monarch`` to ``regency`` in its imports::

    from regency.actor import Actor, endpoint, this_host

    class Counter(Actor):
        def __init__(self, start: int) -> None:
            self.n = start

        @endpoint
        def incr(self) -> int:
            self.n += 1
            return self.n

    procs = this_host().spawn_procs(per_host={"gpus": 4})
    counters = procs.spawn("counters", Counter, 0)
    print(counters.incr.call().get())
"""

from __future__ import annotations

from .. import config as config
from .._api._actor import Actor as Actor
from .._api._actor import concurrent_endpoint as concurrent_endpoint
from .._api._actor import endpoint as endpoint
from .._api._actor_mesh import ActorMesh as ActorMesh
from .._api._as_endpoint import as_endpoint as as_endpoint
from .._api._attach import attach as attach
from .._api._bootstrap import enable_transport as enable_transport
from .._api._bootstrap import shutdown_context as shutdown_context
from .._api._bootstrap_command import BootstrapCommand as BootstrapCommand
from .._api._bootstrap_command import default_bootstrap_cmd as default_bootstrap_cmd
from .._api._context import Context as Context
from .._api._context import Instance as Instance
from .._api._context import context as context
from .._api._context import current_actor_name as current_actor_name
from .._api._context import current_rank as current_rank
from .._api._context import current_size as current_size
from .._api._controllers import get_or_spawn_controller as get_or_spawn_controller
from .._api._deadlines import deadline as deadline
from .._api._endpoint import Accumulator as Accumulator
from .._api._endpoint import Endpoint as Endpoint
from .._api._endpoint import send as send
from .._api._future import Future as Future
from .._api._ids import ProcId as ProcId
from .._api._ids import Uid as Uid
from .._api._mailbox import MailboxLimit as MailboxLimit
from .._api._ports import Channel as Channel
from .._api._ports import Port as Port
from .._api._ports import PortReceiver as PortReceiver
from .._api._proc_mesh import HostMesh as HostMesh
from .._api._proc_mesh import ProcMesh as ProcMesh
from .._api._proc_mesh import this_host as this_host
from .._api._proc_mesh import this_proc as this_proc
from .._api._returns_future import returns_future as returns_future
from .._api._supervise import default_unhandled_fault_hook as _default_hook
from .._api._topology import HostInfo as HostInfo
from .._api._topology import Topology as Topology
from .._api._value_mesh import ValueMesh as ValueMesh
from .._api._worker_loops import run_worker_loop_forever as run_worker_loop_forever
from .._api._worker_loops import run_worker_loop_until_shutdown as run_worker_loop_until_shutdown
from .._api._worker_loops import start_worker_loop_forever as start_worker_loop_forever
from .._api._workers import attach_to_workers as attach_to_workers
from .._config_types import ChannelTransport as ChannelTransport
from .._debug._controller import debug_controller as debug_controller
from .._mesh import Extent as Extent
from .._mesh import Point as Point
from .._mesh import Shape as Shape
from .._mesh import Slice as Slice
from .._observe._telemetry import get_meter as get_meter
from .._observe._telemetry import span as span
from .._observe._telemetry import traced as traced
from ..errors import ActorError as ActorError
from ..errors import MeshFailure as MeshFailure
from ..errors import SupervisionError as SupervisionError

unhandled_fault_hook = _default_hook
"""Called at the controller with a ``MeshFailure`` nobody handled. Replace it by assignment
(``regency.actor.unhandled_fault_hook = fn``); if ``fn`` returns, the failure is dropped; if
it raises (the default raises ``SystemExit(1)``), the program stops: fail fast."""

__all__ = [
    "Accumulator",
    "Actor",
    "BootstrapCommand",
    "ActorError",
    "ActorMesh",
    "Channel",
    "ChannelTransport",
    "Context",
    "Endpoint",
    "Extent",
    "Future",
    "MailboxLimit",
    "HostInfo",
    "HostMesh",
    "Instance",
    "MeshFailure",
    "Point",
    "Port",
    "PortReceiver",
    "ProcId",
    "ProcMesh",
    "Shape",
    "Slice",
    "SupervisionError",
    "Topology",
    "Uid",
    "ValueMesh",
    "as_endpoint",
    "attach",
    "attach_to_workers",
    "concurrent_endpoint",
    "config",
    "debug_controller",
    "context",
    "current_actor_name",
    "current_rank",
    "current_size",
    "deadline",
    "default_bootstrap_cmd",
    "enable_transport",
    "endpoint",
    "get_meter",
    "get_or_spawn_controller",
    "returns_future",
    "run_worker_loop_forever",
    "run_worker_loop_until_shutdown",
    "send",
    "shutdown_context",
    "span",
    "start_worker_loop_forever",
    "this_host",
    "this_proc",
    "traced",
    "unhandled_fault_hook",
]
