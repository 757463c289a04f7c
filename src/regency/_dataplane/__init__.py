"""The data plane: one-sided transfers of registered memory (``regency.rdma``).

Theory of operation
-------------------
Commands travel on the control plane; bulk bytes here. ``RDMABuffer(obj)`` registers a
region of this process's memory (:mod:`._registry`) and yields a small picklable handle
(:mod:`._handle`). Whoever holds the handle copies the region into its own memory, or its
own memory into the region, without the owner's actor code running (:mod:`._transfer`):

* the owner process itself: ``memmove``;
* another process on the same host: ``process_vm_readv``/``writev`` (:mod:`._vm`), one
  copy by the kernel, with validity checked one-sidedly through a per-registration slot;
* where that is refused, or across hosts: authenticated data connections, separate from the
  control connection, to the owner's data-plane server threads (:mod:`._server`,
  :mod:`._client`), streaming straight from and into the memories.

Which transport a pair uses is decided by pure rules (:mod:`._choice`) on each process's
identity (:mod:`._identity`), and reported by ``transport_for`` and by ``regency doctor``
(:mod:`._report`). Nothing here runs on an event loop: transfers never delay messages.
"""

from __future__ import annotations

from ._blocks import Block
from ._buffer import BufferOwner, RDMAAction, RDMABuffer
from ._choice import TRANSPORTS, TransportChoice
from ._errors import (
    BufferDroppedError,
    RDMAError,
    RDMAReadTransferWarning,
    RDMATcpFallbackWarning,
    RDMAWriteTransferWarning,
)
from ._identity import PeerInfo, peer_info
from ._report import describe_transport, doctor_report, get_rdma_backend
from ._reshard import reshard_into
from ._shards import ShardVersionError, TensorShard

__all__ = [
    "TRANSPORTS",
    "Block",
    "BufferDroppedError",
    "BufferOwner",
    "PeerInfo",
    "RDMAAction",
    "RDMABuffer",
    "RDMAError",
    "RDMAReadTransferWarning",
    "RDMATcpFallbackWarning",
    "RDMAWriteTransferWarning",
    "ShardVersionError",
    "TensorShard",
    "TransportChoice",
    "describe_transport",
    "doctor_report",
    "get_rdma_backend",
    "peer_info",
    "reshard_into",
]
