"""Which transport a (reader, owner) pair uses, and why: pure rules, no I/O.

In order of preference:

``local``  the reader is the owner process: one ``memmove``.
``cuda_ipc`` CUDA memory of an owner on the same kernel and pid namespace: the reader maps the
           owner's allocation with a CUDA IPC handle and copies on the GPU (or device to
           host), the owner runs nothing.
``vm``     same kernel and pid namespace: ``process_vm_readv``/``process_vm_writev`` on the
           owner's pages, one copy, the owner runs nothing.
``unix``   same kernel and network namespace, but ``vm`` is refused (ptrace rules): chunked
           stream over a Unix socket to the owner's data-plane thread.
``tcp``    otherwise (another host): chunked stream over TCP to the owner's data-plane
           thread, on connections separate from the control connection.

``REGENCY_RDMA_TRANSPORT`` (or the ``transport=`` argument of a transfer) forces one; a
forced transport the pair cannot use is an error, not a silent fallback.
"""

from __future__ import annotations

from typing import NamedTuple

from ._identity import PeerInfo

__all__ = ["TRANSPORTS", "TransportChoice", "choose"]

TRANSPORTS = ("local", "cuda_ipc", "vm", "unix", "tcp")


class TransportChoice(NamedTuple):
    """A transport name and the reason it was chosen."""

    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.name}: {self.why}"


def _vm_blocked(reader: PeerInfo, vm_denied: bool) -> str | None:
    if not reader.vm_syscalls:
        return "process_vm_readv/writev are not available on this system"
    if vm_denied:
        scope = reader.ptrace_scope
        hint = f" (kernel.yama.ptrace_scope={scope})" if scope else ""
        return f"process_vm_readv was refused for this pair (EPERM{hint})"
    return None


def _forced(name: str, reader: PeerInfo, owner: PeerInfo, has_unix: bool,
            vm_denied: bool, ipc: str | None) -> TransportChoice:
    if name not in TRANSPORTS:
        raise ValueError(f"unknown data-plane transport {name!r}; use one of {TRANSPORTS}")
    why = f"forced ({name})"
    if name == "local" and not reader.same_process(owner):
        raise ValueError("transport 'local' needs the reader to be the owner process")
    if name == "cuda_ipc":
        if ipc is None:
            raise ValueError("transport 'cuda_ipc' needs a buffer of CUDA memory")
        if ipc:
            raise ValueError(f"transport 'cuda_ipc' is not usable: {ipc}")
        if reader.same_process(owner) or not reader.same_pid_space(owner):
            raise ValueError("transport 'cuda_ipc' needs two processes on one host and pid "
                             "namespace")
        blocked = _vm_blocked(reader, vm_denied)
        if blocked:
            raise ValueError(f"transport 'cuda_ipc' is not usable: its validity check "
                             f"needs process_vm_readv, and {blocked}")
    if name == "vm":
        if ipc is not None:
            raise ValueError("transport 'vm' cannot reach CUDA memory; use 'cuda_ipc' (same "
                             "host) or a socket transport ('unix', 'tcp')")
        if not reader.same_pid_space(owner):
            raise ValueError("transport 'vm' needs both processes on one host and pid namespace")
        blocked = _vm_blocked(reader, vm_denied)
        if blocked:
            raise ValueError(f"transport 'vm' is not usable: {blocked}")
    if name == "unix" and not (has_unix and reader.same_net_space(owner)):
        raise ValueError("transport 'unix' needs both processes on one host and network "
                         "namespace, and an owner with a Unix data socket")
    return TransportChoice(name, why)


def choose(reader: PeerInfo, owner: PeerInfo, *, has_unix: bool = True,
           vm_denied: bool = False, forced: str | None = None,
           ipc: str | None = None) -> TransportChoice:
    """The transport ``reader`` uses for a buffer owned by ``owner``.

    ``vm_denied``: the kernel already refused process_vm_* for this pair.
    ``forced``: a transport name that must be used (``"auto"`` or None: choose).
    ``ipc``: for CUDA memory, ``""`` when CUDA IPC can be used by this reader, else why
    not; None for host memory.

    Raises:
        ValueError: ``forced`` names an unknown transport or one this pair cannot use.
    """
    if forced and forced != "auto":
        return _forced(forced, reader, owner, has_unix, vm_denied, ipc)
    if reader.same_process(owner):
        return TransportChoice("local", "same process: one copy")
    if reader.same_pid_space(owner):
        blocked = _vm_blocked(reader, vm_denied)
        if ipc == "" and blocked is None:
            return TransportChoice(
                "cuda_ipc", f"same host ({owner.hostname}), CUDA memory: the owner's "
                            "allocation mapped with a CUDA IPC handle, one copy on the GPU, "
                            "owner code not involved")
        if ipc:
            blocked = f"no CUDA IPC ({ipc}); staged through pinned host memory"
        if blocked is None:
            return TransportChoice(
                "vm", f"same host ({owner.hostname}, one kernel and pid namespace): "
                      "process_vm_readv/writev, one copy, owner code not involved")
        if has_unix and reader.same_net_space(owner):
            return TransportChoice("unix", f"same host, but {blocked}: chunked stream over "
                                           "a Unix data socket")
        return TransportChoice("tcp", f"same host, but {blocked}: chunked TCP stream")
    if reader.same_net_space(owner) and has_unix:
        return TransportChoice("unix", "same host, other pid namespace: chunked stream over "
                                       "a Unix data socket")
    if reader.same_host(owner):
        return TransportChoice("tcp", "same host, other namespaces: chunked TCP stream")
    return TransportChoice("tcp", f"other host ({reader.hostname} -> {owner.hostname}): "
                                  "chunked TCP stream on a separate data connection")
