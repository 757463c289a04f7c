"""One-sided bulk transfers between processes, name for name with ``monarch.rdma``.

::

    from regency.rdma import RDMABuffer

    class Trainer(Actor):
        @endpoint
        def weights(self) -> RDMABuffer:
            return RDMABuffer(self.flat.view(torch.uint8))   # a handle, not the bytes

    class Generator(Actor):
        @endpoint
        def pull(self, handle: RDMABuffer) -> None:
            handle.read_into(self.flat.view(torch.uint8)).get()   # bytes move one-sidedly

Transports are chosen per pair: ``local`` (same process), ``vm`` (same host:
process_vm_readv/writev, one copy), ``unix`` / ``tcp`` (data connections to the owner's
data-plane threads). ``REGENCY_RDMA_TRANSPORT=tcp`` (or ``transport="tcp"`` on a transfer)
forces one. See ``docs/data-plane.md``.
"""

from __future__ import annotations

from ._dataplane import (
    TRANSPORTS,
    Block,
    BufferDroppedError,
    BufferOwner,
    PeerInfo,
    RDMAAction,
    RDMABuffer,
    RDMAError,
    RDMAReadTransferWarning,
    RDMATcpFallbackWarning,
    RDMAWriteTransferWarning,
    ShardVersionError,
    TensorShard,
    TransportChoice,
    describe_transport,
    get_rdma_backend,
    peer_info,
    reshard_into,
)


def is_rdma_available() -> bool:
    """Whether ``RDMABuffer`` can be used here (always: the socket transports need nothing).

    Deprecated in Monarch; kept for compatibility."""
    return True


def is_ibverbs_available() -> bool:
    """Whether an ibverbs (InfiniBand / RoCE / EFA) path exists: not in regency."""
    return False


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
    "get_rdma_backend",
    "is_ibverbs_available",
    "is_rdma_available",
    "peer_info",
    "reshard_into",
]
