"""The worker side of ``to_mesh``: values go from the source workers to the destination
workers directly, never through the controller.

Each destination worker has an inbox: a port of its own proc (``Channel.open``), whose
messages the proc's event loop receives while the worker's thread runs ops. A ``SEND`` in
the source's stream sends ``(tid, payload)`` to the inboxes of the destination ranks that
take this rank's values; a ``RECV`` in the destination's stream blocks the worker until
transfer ``tid`` is in its inbox. Every ``SEND`` is issued (and flushed) before its
``RECV``, and each stream runs in order, so the wait always ends while the source lives.
"""

from __future__ import annotations

from typing import Any

import torch

from .._api._ports import Channel, Port
from ._messages import WorkerError

__all__ = ["Inbox", "recv", "send"]

_GONE = object()


class Inbox:
    """The transfers that reached this worker, by id (they may arrive in any order)."""

    def __init__(self) -> None:
        self.port: Port[Any]
        self.port, self._receiver = Channel.open()
        self._arrived: dict[int, list[Any]] = {}

    def wait(self, tid: int) -> list[Any]:
        """The values of transfer ``tid`` (a ``WorkerError`` for each that failed)."""
        arrived = self._arrived
        while tid not in arrived:
            got, payload = self._receiver.recv().get()
            arrived[got] = payload
        return arrived.pop(tid)


def send(worker: Any, msg: tuple[Any, ...]) -> None:
    """Run a ``SEND``: this rank's values (or their errors) to its destination inboxes."""
    _, seq, tid, refs, ports, mesh_id = msg
    mine: list[Port[Any]] = ports.get(worker.rank, [])
    if not mine:
        return
    table = worker.table
    values = [_outgoing(table.get(r, _GONE), seq, worker.rank, mesh_id) for r in refs]
    for port in mine:
        port.send((tid, values))  # the wire copies (or holds) it: later writes don't show


def recv(worker: Any, msg: tuple[Any, ...]) -> None:
    """Run a ``RECV``: wait for transfer ``tid``; store its values (or errors) in the table."""
    _, _seq, tid, results = msg
    values = worker.inbox_of().wait(tid)
    table = worker.table
    device = getattr(worker, "device", None)  # this rank's own GPU (None: no CUDA)
    for (ref, stride), value in zip(results, values):
        if isinstance(value, torch.Tensor) and value.is_cuda and device is not None \
                and value.device != device:
            value = value.to(device)  # a CUDA value lives on this rank's GPU
        if isinstance(value, torch.Tensor) and tuple(value.stride()) != stride:
            laid = torch.empty_strided(value.shape, stride, dtype=value.dtype,
                                       device=value.device)
            value = laid.copy_(value)  # the layout the controller's metadata says
        table[ref] = value


def _outgoing(value: Any, seq: int, rank: int, mesh_id: int) -> Any:
    """What a SEND sends for one value: the tensor, or the error (naming its mesh)."""
    if value is _GONE:
        return WorkerError(seq, rank, "to_mesh", "the value to move is not defined on the "
                           "source worker (was it dropped?)", mesh_id)
    if type(value) is WorkerError:
        return WorkerError(value.seq, value.rank, value.fn, value.message,
                           value.mesh or mesh_id)
    return value.detach() if isinstance(value, torch.Tensor) else value
