"""Reporting transports: ``describe_transport``, ``get_rdma_backend`` and the ``doctor`` table.

The doctor does not guess: every proc registers a small buffer and reads every other one's
(the controller's too) with the transport it would choose, then checks the bytes. It reports,
per pair, the transport actually used (after any fallback), whether it worked, and why it was
chosen; then it checks the TCP data path explicitly (the one other hosts would use).
"""

from __future__ import annotations

import ctypes.util
import glob
import importlib.util
import os
import sys
import time
from typing import Any

from .._api._actor import Actor, endpoint
from ._buffer import RDMABuffer
from ._choice import TransportChoice, choose
from ._identity import PeerInfo, peer_info

__all__ = ["DataPlaneProbe", "describe_transport", "doctor_report", "get_rdma_backend"]

_PROBE_BYTES = 1 << 16


def describe_transport(owner: PeerInfo, reader: PeerInfo | None = None) -> TransportChoice:
    """Which transport ``reader`` (default: this process) would use towards ``owner``, and why.

    Both are :func:`peer_info` values taken in the processes concerned. This applies the
    rules only; a pair whose ``vm`` is refused by the kernel at run time falls back further.

    Raises:
        TypeError: ``owner`` or ``reader`` is not a ``peer_info()`` value (for a buffer's
            owner, ``buf.transport_for()`` answers the same question).
    """
    for name, info in (("owner", owner), ("reader", reader)):
        if info is not None and not isinstance(info, PeerInfo):
            raise TypeError(f"describe_transport({name}=...): expected a peer_info() value "
                            f"taken in that process, not {type(info).__name__}; for a "
                            f"buffer, buf.transport_for(reader) says which transport it uses")
    return choose(reader or peer_info(), owner,
                  forced=os.environ.get("REGENCY_RDMA_TRANSPORT") or None)


def get_rdma_backend() -> str:
    """The same-host transport of this process: ``"vm"`` where process_vm_readv exists,
    else ``"tcp"`` (Monarch answers ``"ibverbs"``, ``"tcp"`` or ``"none"``)."""
    return "vm" if peer_info().vm_syscalls else "tcp"


def _pattern(seed: int) -> bytearray:
    return bytearray((seed * 31 + i) & 0xFF for i in range(256)) * (_PROBE_BYTES // 256)


def _probe_read(buf: RDMABuffer, seed: int, transport: str | None = None) -> dict[str, Any]:
    dst = bytearray(buf.size())
    start = time.perf_counter()
    try:
        buf.read_into(dst, transport=transport, timeout=10).get(timeout=15)
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                "choice": tuple(buf.transport_for())}
    took = time.perf_counter() - start
    ok = dst == _pattern(seed)
    return {"ok": ok, "error": "" if ok else "bytes differ", "seconds": took,
            "choice": tuple(buf.transport_for()) if transport is None else (transport, "forced")}


class DataPlaneProbe(Actor):
    """Registers one small buffer per proc and reads the others' (used by the doctor)."""

    def __init__(self) -> None:
        self.seed = os.getpid() % 251
        self.buf = RDMABuffer(_pattern(self.seed))

    @endpoint
    def handle(self) -> tuple[RDMABuffer, int, PeerInfo]:
        return self.buf, self.seed, peer_info()

    @endpoint
    def read(self, buf: RDMABuffer, seed: int, transport: str | None = None) -> dict[str, Any]:
        return _probe_read(buf, seed, transport)

    @endpoint
    def release(self) -> None:
        self.buf.drop().get(timeout=10)


def _gpu_line() -> str:
    """Which GPU paths this host has, and why not where it has none."""
    if sys.modules.get("torch") is None and importlib.util.find_spec("torch") is None:
        if glob.glob("/dev/nvidia[0-9]*") or ctypes.util.find_library("cuda"):
            return ("gpu: a CUDA driver is present but torch is not installed; CUDA tensors "
                    "and buffers need torch (pip install torch)")
        return "gpu: no CUDA device, no torch; GPU paths not needed here"
    from . import _cuda

    state = _cuda.status()
    if not _cuda.available():
        return f"gpu: {state}"
    return (f"gpu: {state}\n  CUDA IPC (same host, device to device): {_ipc_probe()}\n"
            "  across hosts: staged through pinned host memory over TCP, in chunks\n"
            "  GPUDirect RDMA: not available (no ibverbs path in regency)")


def _ipc_probe() -> str:
    """Whether this process can export an IPC handle of a fresh CUDA allocation."""
    import torch

    from . import _cuda

    t = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    try:
        _cuda.ipc_export(int(t.data_ptr()), int(t.device.index))
    except (_cuda.CudaError, OSError, AttributeError) as exc:
        hint = ""
        if "expandable_segments" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
            hint = " (PYTORCH_CUDA_ALLOC_CONF has expandable_segments: its memory has no " \
                   "legacy IPC handles)"
        return f"no: {exc}{hint}; CUDA memory is staged through the host instead"
    return "yes (driver IPC handles; mappings cached per allocation)"


def doctor_report(procs: Any = None) -> str:
    """A table of the transport each pair of (controller, 2 procs) uses, tested for real.

    ``procs``: a ProcMesh to probe (at least 2 procs are best); by default two procs are
    spawned on this host and stopped afterwards.
    """
    from .._api._proc_mesh import this_host

    me = peer_info()
    own = procs is None
    if own:
        procs = this_host().spawn_procs(per_host={"procs": 2}, name="dataplane-doctor")
    lines = [f"data plane: pid {me.pid} on {me.hostname}; process_vm_readv: "
             f"{'yes' if me.vm_syscalls else 'no'}; yama ptrace_scope: "
             f"{me.ptrace_scope if me.ptrace_scope is not None else 'n/a'}; forced transport: "
             f"{os.environ.get('REGENCY_RDMA_TRANSPORT') or 'none'}"]
    probes = procs.spawn("dataplane_probe", DataPlaneProbe)
    local = RDMABuffer(_pattern(7))
    try:
        handles = list(probes.handle.call().get(timeout=30).values())
        names = ["controller"] + [f"proc {i}" for i in range(len(handles))]
        owners = [(local, 7)] + [(h, s) for h, s, _ in handles]
        rows = []
        for r, reader in enumerate(names):
            for o, (buf, seed) in enumerate(owners):
                if r == o:
                    continue
                if r == 0:
                    res = _probe_read(buf, seed)
                else:
                    res = probes.slice(procs=r - 1).read.call_one(buf, seed).get(timeout=30)
                rows.append((reader, names[o], res))
        lines.append(_table(rows))
        if len(handles) >= 2:
            res = probes.slice(procs=0).read.call_one(handles[1][0], handles[1][1],
                                                      "tcp").get(timeout=30)
            state = "ok" if res["ok"] else f"FAILED ({res['error']})"
            lines.append(f"tcp data connections (the path across hosts), proc 0 -> proc 1: "
                         f"{state}")
        lines.append(_gpu_line())
        probes.release.call().get(timeout=30)
    finally:
        local.drop()
        if own:
            procs.stop().get(timeout=30)
    return "\n".join(lines)


def _table(rows: list[tuple[str, str, dict[str, Any]]]) -> str:
    out = ["  reader -> owner          transport  result  why"]
    for reader, owner, res in rows:
        name, why = res["choice"]
        state = "ok" if res["ok"] else "FAILED"
        out.append(f"  {reader + ' -> ' + owner:<24} {name:<10} {state:<7} {why}")
        if not res["ok"]:
            out.append(f"      {res['error']}")
    return "\n".join(out)
