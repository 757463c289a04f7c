"""Paired A/B runs of regency against itself: CPU and time per call, variant after variant.

The suite (``benchmarks.run``) compares frameworks; this compares two builds or settings of
regency, where the VM's drift (up to 2x within an hour) would swamp a difference measured an
hour apart. Each *pair* runs every variant once, back to back, in a fresh process; the
figures to compare are those of one pair, and the median over pairs::

    .venv/bin/python -m benchmarks.ab --variant base=/tmp/old/src --variant new=src
    .venv/bin/python -m benchmarks.ab --variant off=src:REGENCY_BORROW_LINGER=0 \\
        --variant on=src --workload pipelined --pairs 5
    .venv/bin/python -m benchmarks.ab --variant base=/tmp/old/src --variant new=src --load 4

A variant is ``NAME=SRC[:ENV=VALUE,...]``: the ``src`` directory to import regency from
(another checkout, built or not) and environment settings. Workloads: ``sync`` (a loop of
``call_one(1).get()``), ``pipelined`` (rounds of ``call_one`` then the ``get``s),
``async`` (``sync``'s loop to an async actor), ``beside`` (the same, with an idle sync
actor in the async actor's proc), ``actors`` (an async actor's loop of awaited calls to
an async actor of another proc), ``same_proc`` (a sync actor's loop of ``call_one().get()``
to a sync actor of its own proc), and ``printing``, ``printing_pipelined`` (``sync`` and
``pipelined`` to an endpoint that prints a line each call). ``--worker`` puts the procs
on a ``regency worker`` of this machine (loopback TCP) instead of ``this_host()``.
Reported per call: wall time, the controller's CPU and the procs' CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.run import cpu_load

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, os, sys, time
import psutil
from regency.actor import this_host
from benchmarks._actors import AsyncCaller, AsyncPinger, SyncCaller, SyncPinger

workload, calls, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hosts = this_host()
if os.environ.get("AB_WORKER"):  # the procs on a worker host (loopback TCP)
    import subprocess
    from regency.actor import attach_to_workers
    worker = subprocess.Popen([sys.executable, "-m", "regency", "worker", "--listen",
                               "tcp://127.0.0.1:0", "--advertise", "127.0.0.1"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in worker.stdout:
        if "regency worker listening on" in line:
            break
    hosts = attach_to_workers([line.rsplit(" ", 1)[1].strip()])
procs = hosts.spawn_procs(per_host={"procs": 1})
if workload == "actors":  # an async actor's awaited calls to an async actor of another proc
    other = this_host().spawn_procs(per_host={"procs": 1})
    caller, mesh = procs.spawn("caller", AsyncCaller), other.spawn("ab", AsyncPinger)
elif workload == "same_proc":  # a sync actor's calls to a sync actor of its own proc
    caller, mesh = procs.spawn("caller", SyncCaller), procs.spawn("ab", SyncPinger)
elif workload == "beside":  # an async actor beside an idle sync actor of its proc
    procs.spawn("idle", SyncPinger).ping.call_one(1).get()
    mesh = procs.spawn("ab", AsyncPinger)
elif workload == "async":
    mesh = procs.spawn("ab", AsyncPinger)
else:
    mesh = procs.spawn("ab", SyncPinger)
ping = mesh.say if workload.startswith("printing") else mesh.ping
for _ in range(2000):
    ping.call_one(1).get()
if workload in ("actors", "same_proc"):
    caller.call_seq.call_one(mesh, 2000).get()
kids = psutil.Process().children(recursive=True)
def kid_cpu():
    return sum(sum(k.cpu_times()[:2]) for k in kids)
cpu0, kids0, t0 = time.process_time(), kid_cpu(), time.perf_counter()
for _ in range(rounds):
    if workload in ("actors", "same_proc"):
        caller.call_seq.call_one(mesh, calls).get()
    elif not workload.endswith("pipelined"):
        for _ in range(calls):
            ping.call_one(1).get()
    else:
        futures = [ping.call_one(i) for i in range(calls)]
        for f in futures:
            f.get()
n = calls * rounds
out = {"wall_us": (time.perf_counter() - t0) / n * 1e6,
       "ctrl_cpu_us": (time.process_time() - cpu0) / n * 1e6,
       "procs_cpu_us": (kid_cpu() - kids0) / n * 1e6}
procs.stop().get()
if workload == "actors":
    other.stop().get()
if os.environ.get("AB_WORKER"):
    hosts.shutdown()
print("@@ab " + json.dumps(out), flush=True)
"""


def _variant(text: str) -> tuple[str, Path, dict[str, str]]:
    name, _, rest = text.partition("=")
    src, _, env_text = rest.partition(":")
    if not name or not src:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected NAME=SRC[:ENV=V,...]")
    env = dict(item.split("=", 1) for item in env_text.split(",") if item)
    return name, Path(src).resolve(), env


def _run_once(src: Path, env: dict[str, str], workload: str, calls: int, rounds: int,
              timeout: float) -> dict[str, float]:
    child_env = {**os.environ, **env, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}",
                 "BENCH_FRAMEWORK": "regency", "REGENCY_SECRET": "benchmarks-ab"}
    done = subprocess.run([sys.executable, "-c", _CHILD, workload, str(calls), str(rounds)],
                          env=child_env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("@@ab "):
            return json.loads(line[5:])  # type: ignore[no-any-return]
    raise RuntimeError(f"variant at {src} failed (rc {done.returncode}):\n{done.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", type=_variant, required=True,
                        help="NAME=SRC[:ENV=VALUE,...]; give two or more")
    parser.add_argument("--workload", default="sync",
                        choices=("sync", "pipelined", "async", "beside", "actors", "same_proc",
                                 "printing", "printing_pipelined"))
    parser.add_argument("--worker", action="store_true",
                        help="spawn the procs on a loopback regency worker")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--load", type=int, default=0, metavar="N",
                        help="N CPU-bound processes beside every run (as benchmarks.run)")
    args = parser.parse_args(argv)
    with cpu_load(args.load):
        _pairs(args)
    return 0


def _pairs(args: argparse.Namespace) -> None:
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in args.variant}
    for pair in range(args.pairs):
        cells = []
        for name, src, env in args.variant:
            env = {**env, "AB_WORKER": "1"} if args.worker else env
            got = _run_once(src, env, args.workload, args.calls, args.rounds, args.timeout)
            results[name].append(got)
            cells.append(f"{name} {got['wall_us']:.1f}/{got['ctrl_cpu_us']:.1f}/"
                         f"{got['procs_cpu_us']:.1f}")
        print(f"pair {pair + 1} (us per call: wall/controller CPU/procs CPU): "
              + "  ".join(cells), flush=True)
    print(f"median of {args.pairs} pairs, {args.workload}:")
    for name, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"  {name:>12}: wall {med['wall_us']:.1f} us, controller CPU "
              f"{med['ctrl_cpu_us']:.1f} us, procs CPU {med['procs_cpu_us']:.1f} us per call")


if __name__ == "__main__":
    sys.exit(main())
