"""GPU data-plane figures: CUDA tensors through endpoints, RDMABuffer over CUDA memory.

Run on a machine with a CUDA device, from the repository root::

    python -m benchmarks.gpu [--json OUT] [--iters N]

Measures, in one run, with the physical baselines of the same device measured between them:

* ``echo_cuda_256MiB``: a 256 MiB CUDA tensor echoed controller -> proc -> controller through
  ``call_one`` (GB/s = 2 x size / median round trip, as the CPU echo benchmarks), lent through
  the data plane (default) and pickled by torch through the host (``REGENCY_CUDA_LEND=0``);
* ``d2d_copy_1GiB`` and ``rdma_read_cuda_to_cuda_1GiB`` (a proc's CUDA buffer read into a
  CUDA tensor of the controller, ``cuda_ipc``); their ratio is the issue's target (>= 0.5);
* ``pinned_d2h_1GiB`` and ``rdma_read_cuda_to_pinned_1GiB`` (into a pinned CPU tensor of the
  controller); target ratio >= 0.7;
* ``rdma_read_cuda_staged_tcp_1GiB``: the path across hosts, forced here (pinned chunks and a
  TCP data connection on both sides).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from regency.actor import Actor, endpoint, this_host
from regency.rdma import RDMABuffer

MiB, GiB = 1 << 20, 1 << 30


class GpuPeer(Actor):
    """Echoes tensors; owns one CUDA buffer."""

    def __init__(self) -> None:
        self.keep: Any = None

    @endpoint
    def echo(self, t: Any) -> Any:
        return t

    @endpoint
    def own(self, n: int) -> RDMABuffer:
        self.keep = torch.full((n,), 7, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        return RDMABuffer(self.keep)


def _timed(fn: Callable[[], None], iters: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _echo(peer: Any, iters: int) -> float:
    t = torch.ones(256 * MiB // 4, dtype=torch.float32, device="cuda")
    med = _timed(lambda: peer.echo.call_one(t).get(timeout=120), iters)
    return 2 * t.numel() * 4 / med / 1e9


def _copy(dst: Any, src: Any, iters: int) -> float:
    def once() -> None:
        dst.copy_(src)
        torch.cuda.synchronize()

    return src.numel() / _timed(once, iters) / 1e9


def _read(buf: RDMABuffer, dst: Any, iters: int, transport: str | None = None) -> float:
    med = _timed(lambda: buf.read_into(dst, transport=transport).get(timeout=120), iters)
    return buf.size() / med / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--iters", type=int, default=7)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    it = args.iters
    out: dict[str, float] = {}
    lent = this_host().spawn_procs(per_host={"procs": 1}, name="gpu-lent")
    peer = lent.spawn("peer", GpuPeer).slice(procs=0)
    out["echo_cuda_256MiB_GBps"] = _echo(peer, it)
    os.environ["REGENCY_CUDA_LEND"] = "0"  # torch's own pickling, here and in new procs
    pickled = this_host().spawn_procs(per_host={"procs": 1}, name="gpu-pickled")
    out["echo_cuda_256MiB_torch_pickle_GBps"] = _echo(
        pickled.spawn("peer", GpuPeer).slice(procs=0), 3)
    del os.environ["REGENCY_CUDA_LEND"]
    pickled.stop().get(timeout=60)

    src = torch.full((GiB,), 3, dtype=torch.uint8, device="cuda")
    dev_dst = torch.empty(GiB, dtype=torch.uint8, device="cuda")
    pinned = torch.empty(GiB, dtype=torch.uint8, pin_memory=True)
    buf = peer.own.call_one(GiB).get(timeout=120)
    out["d2d_copy_1GiB_GBps"] = _copy(dev_dst, src, it)
    out["rdma_read_cuda_to_cuda_1GiB_GBps"] = _read(buf, dev_dst, it)
    out["pinned_d2h_1GiB_GBps"] = _copy(pinned, src, it)
    out["rdma_read_cuda_to_pinned_1GiB_GBps"] = _read(buf, pinned, it)
    out["rdma_read_cuda_staged_tcp_1GiB_GBps"] = _read(buf, dev_dst, 3, "tcp")
    assert int(dev_dst[:4096].sum().item()) == 7 * 4096
    out["ratio_ipc_vs_d2d"] = out["rdma_read_cuda_to_cuda_1GiB_GBps"] / out["d2d_copy_1GiB_GBps"]
    out["ratio_d2pinned_vs_pinned_d2h"] = (out["rdma_read_cuda_to_pinned_1GiB_GBps"]
                                           / out["pinned_d2h_1GiB_GBps"])
    lent.stop().get(timeout=60)
    out["device"] = torch.cuda.get_device_name(0)  # type: ignore[assignment]
    out["torch"] = torch.__version__  # type: ignore[assignment]
    for k, v in out.items():
        print(f"{k:42s} {v:.3f}" if isinstance(v, float) else f"{k:42s} {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
