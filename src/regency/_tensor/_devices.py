"""Which CUDA device a tensor worker uses, and which backend a collective group gets (no torch).

Pure functions, so that the rules are unit-tested without torch or a GPU:

* **Device.** Each worker of a device mesh owns one CUDA device: the coordinate of its proc
  along a dim named ``gpus`` (or ``gpu``) of the proc mesh the procs were spawned as, else its
  index among the procs of the same host; modulo the device count of its host (so several
  procs may share a device when there are fewer devices than procs).
* **Backend.** A group of ranks gets NCCL for CUDA tensors (``cpu:gloo,cuda:nccl``: gloo
  still serves CPU tensors) when NCCL is available and every member has a CUDA device of its
  own; otherwise gloo alone (NCCL refuses two ranks on one device), and collectives on CUDA
  tensors are staged through CPU memory.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

__all__ = ["GLOO", "GPU_DIMS", "NCCL", "Lifted", "choose_backend", "device_index",
           "host_ranks", "local_rank", "uses_nccl"]

#: the mesh dims whose coordinate names a proc's GPU on its host, first found wins
GPU_DIMS = ("gpus", "gpu")
GLOO = "gloo"
#: gloo for CPU tensors, NCCL for CUDA tensors, in one process group
NCCL = "cpu:gloo,cuda:nccl"


def host_ranks(hosts: Sequence[Hashable]) -> list[int]:
    """For each proc (``hosts[i]`` names the host of proc ``i``), its index among the procs
    of the same host, counted in order: ``["a", "b", "a"]`` gives ``[0, 0, 1]``."""
    seen: dict[Hashable, int] = {}
    out: list[int] = []
    for h in hosts:
        n = seen.get(h, 0)
        out.append(n)
        seen[h] = n + 1
    return out


def local_rank(coords: dict[str, int], on_host: int) -> int:
    """The GPU slot of a proc: its ``gpus`` (or ``gpu``) coordinate in the mesh it was spawned
    as, else ``on_host``, its index among the procs of its host."""
    for dim in GPU_DIMS:
        if dim in coords:
            return coords[dim]
    return on_host


def device_index(local: int, device_count: int) -> int | None:
    """The CUDA device index of GPU slot ``local`` on a host with ``device_count`` devices
    (``None``: no device)."""
    if device_count <= 0:
        return None
    return local % device_count


def choose_backend(devices: Sequence[Hashable | None], nccl_available: bool) -> str:
    """The backend of a group whose members use ``devices`` (a device's identity, equal for
    ranks sharing a device; ``None`` for a member without CUDA): :data:`NCCL` when NCCL is
    available and every member has a device of its own, else :data:`GLOO`."""
    if not nccl_available or not devices or any(d is None for d in devices):
        return GLOO
    if len(set(devices)) != len(devices):
        return GLOO  # NCCL refuses two ranks on one device
    return NCCL


def uses_nccl(backend: str) -> bool:
    """Whether a group of ``backend`` runs collectives on CUDA tensors with NCCL."""
    return "nccl" in backend


class Lifted:
    """A tensor the controller made locally on a device (``torch.tensor(data,
    device="cuda")`` under an active mesh), sent as a CPU copy: each worker moves ``value``
    to its own device of ``device``'s type."""

    __slots__ = ("device", "value")

    def __init__(self, value: Any, device: Any) -> None:
        self.value = value
        self.device = device

    def __reduce__(self) -> tuple[Any, ...]:
        return (Lifted, (self.value, self.device))
