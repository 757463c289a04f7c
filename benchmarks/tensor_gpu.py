"""The tensor engine on CUDA: dispatch rate and a 64 MiB all-reduce, against bare torch.

Run on a machine with a CUDA device, from the repository root::

    python -m benchmarks.tensor_gpu [--ops 5000] [--iters 5]

(``--device cpu`` runs the same measures on CPU tensors, with gloo: a check of the script on
a machine without a GPU, not a GPU figure.)

Measures, in one run (well under a minute):

* ``x = x + 1`` on a 2-rank mesh (``{gpus: 2}``), 1-element CUDA tensors, one fetch at the end:
  ops per second from the first op to the fetched value (which checks the count);
* ``reduce_`` (sum) of 64 MiB of float32 on CUDA over the same mesh, median of ``--iters``
  (each followed by a 4-byte fetch, which waits for it), against a bare
  ``torch.distributed.all_reduce`` of the same tensor among 2 processes on the same devices,
  with the backend the engine uses there: NCCL when the ranks have GPUs of their own, gloo
  when they share one (the engine stages through CPU memory then; gloo's own CUDA path
  stages too).

Imports torch only when run; without CUDA it says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from typing import Any

MiB = 1 << 20
RANKS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sync(torch: Any, dev: Any) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _bare_rank(rank: int, port: int, backend: str, n: int, iters: int, device: str,
               out: Any) -> None:
    """One process of the bare baseline: all-reduce ``n`` floats ``iters`` times."""
    import torch
    import torch.distributed as dist

    dev = torch.device("cpu")
    if device == "cuda":
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=RANKS)
    x = torch.ones(n, device=dev)
    dist.all_reduce(x)  # warm: connections, buffers
    _sync(torch, dev)
    times = []
    for _ in range(iters):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(x)
        _sync(torch, dev)
        times.append(time.perf_counter() - start)
    if rank == 0:
        out.put(statistics.median(times))
    dist.destroy_process_group()


def bare_all_reduce(backend: str, n: int, iters: int, device: str) -> float:
    """Median seconds of one bare all-reduce of ``n`` floats among 2 processes."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_bare_rank, args=(r, port, backend, n, iters, device, out))
             for r in range(RANKS)]
    for p in procs:
        p.start()
    result = float(out.get(timeout=120))
    for p in procs:
        p.join(timeout=60)
    return result


def engine(ops: int, n: int, iters: int, device: str) -> tuple[float, float, str]:
    """(ops/s of x = x + 1, median seconds of one all-reduce, backend) on the engine."""
    import torch

    from regency import fetch_shard, reduce_, remote
    from regency.actor import this_host

    procs = this_host().spawn_procs(per_host={"gpus": RANKS}, name="tensor-gpu")
    try:
        with procs.activate():
            x = torch.zeros(1, device=device)
            for _ in range(200):
                x = x + 1
        fetch_shard(x).get(timeout=120)  # workers up, CUDA warm
        with procs.activate():
            start = time.perf_counter()
            for _ in range(ops):
                x = x + 1
        value = fetch_shard(x).get(timeout=120)
        rate = ops / (time.perf_counter() - start)
        assert float(value[0]) == ops + 200, value

        with procs.activate():
            big = torch.ones(n, device=device)
            reduce_(big, "gpus", "sum")  # warm: the group and its connections
            head = big[:1]
        fetch_shard(head).get(timeout=120)
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            with procs.activate():
                reduce_(big, "gpus", "sum")
                head = big[:1]
            fetch_shard(head).get(timeout=120)
            times.append(time.perf_counter() - start)
        with procs.activate():
            groups = remote("regency._tensor._comm_ops.nccl_group_count",
                            propagate="inspect").call().get(timeout=120)
        backend = "nccl" if all(g > 0 for g in groups.values()) else "gloo"
        return rate, statistics.median(times), backend
    finally:
        procs.stop().get(timeout=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=5000)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("benchmarks.tensor_gpu needs torch with CUDA; torch is not installed")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("benchmarks.tensor_gpu needs a CUDA device; none is available here "
              "(run it on a GPU machine)", file=sys.stderr)
        sys.exit(2)
    n = args.mib * MiB // 4
    rate, mesh_s, backend = engine(args.ops, n, args.iters, args.device)
    bare_s = bare_all_reduce(backend, n, args.iters, args.device)
    size = f"{args.mib} MiB"
    rows = [(f"x = x + 1, 1 element, 2 ranks, {args.device} (ops/s)", f"{rate:,.0f}", "", ""),
            (f"all-reduce {size} float32, {args.device}, {backend} (ms)", f"{mesh_s * 1e3:.2f}",
             f"{bare_s * 1e3:.2f}", f"{bare_s / mesh_s:.2f}x")]
    name = (f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
            if args.device == "cuda" else "cpu")
    print(f"device: {name}; torch {torch.__version__}")
    print(f"{'measure':<44}{'regency':>12}{'bare torch':>12}{'ratio':>8}  (ratio: bare / regency "
          "time)")
    for name, a, b, c in rows:
        print(f"{name:<44}{a:>12}{b:>12}{c:>8}")


if __name__ == "__main__":
    main()
