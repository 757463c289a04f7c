"""What a handle carries across processes: everything a reader needs, nothing to unpickle.

The owner keeps the memory (and the object that holds it) in its registry until ``drop()``.
A handle names the registration (``reg_id``) with a random ``key`` that the owner also
writes into a *slot*: a 64-bit word in the owner's memory at ``slot_addr``. While the
registration lives, the slot holds the key; ``drop()`` clears it first. Readers on the same
host read the slot one-sidedly before (and, for reads, after) a transfer, so a dropped
buffer gives an error, never stale memory, without asking the owner anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._identity import PeerInfo

__all__ = ["Descriptor"]


@dataclass(frozen=True)
class Descriptor:
    """The pickled state of an ``RDMABuffer``."""

    reg_id: int
    key: int
    size: int
    readonly: bool
    address: int  # start of the memory in the owner
    slot_addr: int  # the owner's validity word for this registration
    owner: PeerInfo
    control: str  # the owner runtime's address (drop from elsewhere)
    unix: str | None  # the owner's data-plane addresses
    tcp: str | None
    kind: str = "bytes"
    dtype: str = "uint8"
    device: int = -1  # the owner's CUDA device index for device memory; -1: host memory
    ipc: bytes | None = None  # CUDA IPC handle of the allocation holding the memory
    ipc_offset: int = 0  # where the memory starts in that allocation
    ipc_error: str = ""  # why there is no IPC handle, for device memory without one
    offset: int = 0  # where ``address`` is in the registration (a handle to part of it)
    part: bool = False  # whether this is a handle to part of the registration

    @property
    def on_device(self) -> bool:
        """Whether the registered memory is CUDA device memory."""
        return self.device >= 0
