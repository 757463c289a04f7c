"""Who a process is, for choosing transports: host, namespaces, pid.

"Same host" must be reliable: two containers may share a hostname, and one kernel may run
many containers. We compare the kernel's boot id (unique per boot of a machine) and, for the
paths that name a process by pid or a socket by an abstract name, the pid and network
namespaces (their inode numbers under ``/proc/self/ns``).
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass

__all__ = ["PeerInfo", "peer_info"]


@dataclass(frozen=True)
class PeerInfo:
    """The identity of one process, as far as the data plane cares.

    Obtain it with :func:`regency.rdma.peer_info` in the process concerned (for example from
    an endpoint) and pass it to :func:`regency.rdma.describe_transport`.
    """

    hostname: str
    host_key: str  # boot id (or machine id + hostname where there is none)
    pid_ns: int  # inode of the pid namespace (0: unknown)
    net_ns: int  # inode of the network namespace (0: unknown)
    pid: int
    uid: int
    vm_syscalls: bool  # process_vm_readv/writev exist here
    ptrace_scope: int | None  # kernel.yama.ptrace_scope, None without Yama

    def same_host(self, other: PeerInfo) -> bool:
        """Whether both run on one kernel."""
        return self.host_key == other.host_key

    def same_pid_space(self, other: PeerInfo) -> bool:
        """Whether a pid means the same process to both (same kernel, same pid namespace)."""
        return self.same_host(other) and self.pid_ns == other.pid_ns and self.pid_ns != 0

    def same_net_space(self, other: PeerInfo) -> bool:
        """Whether an abstract Unix socket name means the same socket to both."""
        return self.same_host(other) and self.net_ns == other.net_ns and self.net_ns != 0

    def same_process(self, other: PeerInfo) -> bool:
        """Whether both are this very process."""
        return self.same_pid_space(other) and self.pid == other.pid


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _ns(name: str) -> int:
    try:
        return os.stat(f"/proc/self/ns/{name}").st_ino
    except OSError:
        return 0


def _host_key(hostname: str) -> str:
    boot = _read("/proc/sys/kernel/random/boot_id")
    if boot:
        return "boot:" + boot
    machine = _read("/etc/machine-id")
    return f"machine:{machine}:{hostname}" if machine else f"host:{hostname}"


def ptrace_scope() -> int | None:
    """``kernel.yama.ptrace_scope`` (None where Yama is not enabled)."""
    text = _read("/proc/sys/kernel/yama/ptrace_scope")
    return int(text) if text.isdigit() else None


_cached: PeerInfo | None = None


def peer_info() -> PeerInfo:
    """The identity of the calling process (cached per process)."""
    global _cached
    if _cached is None or _cached.pid != os.getpid():
        from . import _vm

        hostname = socket.gethostname()
        _cached = PeerInfo(hostname=hostname, host_key=_host_key(hostname), pid_ns=_ns("pid"),
                           net_ns=_ns("net"), pid=os.getpid(),
                           uid=os.getuid() if hasattr(os, "getuid") else -1,
                           vm_syscalls=_vm.available(),
                           ptrace_scope=ptrace_scope() if sys.platform == "linux" else None)
    return _cached
