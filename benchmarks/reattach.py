"""Detach and reattach: a new controller's first answer from procs it reattached, against
one that spawns them afresh.

    .venv/bin/python benchmarks/reattach.py                  # 7 rounds, init 0 s
    .venv/bin/python benchmarks/reattach.py --init 2 --runs 5 --json out.json

Two ``regency worker`` processes on loopback stand for two hosts. Each round runs two
controllers one after the other, each a fresh Python process:

* ``cold``: attach, ``spawn_procs({hosts: 2, gpus: 2})``, spawn an actor whose ``__init__``
  takes ``--init`` seconds (loading weights, say), call it once; then ``detach()``;
* ``warm``: attach, ``reattach_procs``, ``actor_meshes()``, call it once; then end (the procs
  end with it).

Figures (median over the rounds, milliseconds): ``ready``, from before the attach to the
first answer, measured in the controller; ``process``, the controller's whole run
(interpreter start and exit included), measured outside. Only regency keeps procs across
controllers (Monarch and Ray start them afresh), so there is no peer column.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

CHILD = """
import json, os, sys, time
t0 = time.perf_counter()
from regency.actor import Actor, attach_to_workers, endpoint

class Model(Actor):
    def __init__(self, seconds: float) -> None:
        time.sleep(seconds)

    @endpoint
    def step(self) -> int:
        return os.getpid()

mode, init, workers = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
hosts = attach_to_workers(workers)
if mode == "cold":
    procs = hosts.spawn_procs(per_host={"gpus": 2}, name="bench")
    model = procs.spawn("model", Model, init)
else:
    procs = hosts.reattach_procs("bench")
    model = procs.actor_meshes()["model"]
model.step.call().get(timeout=120)
ready = time.perf_counter() - t0
if mode == "cold":
    procs.detach()
print("@@ready " + json.dumps(ready * 1e3), flush=True)
"""


def _workers(env: dict[str, str], n: int) -> tuple[list[subprocess.Popen[str]], list[str]]:
    procs, addrs = [], []
    for _ in range(n):
        worker = subprocess.Popen(
            [sys.executable, "-m", "regency", "worker", "--listen", "tcp://127.0.0.1:0",
             "--advertise", "127.0.0.1"], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
        procs.append(worker)
        assert worker.stdout is not None
        for line in worker.stdout:
            if "regency worker listening on" in line:
                addrs.append(line.rsplit(" ", 1)[1].strip())
                break
        else:
            raise RuntimeError("a worker did not start")
    return procs, addrs


def _controller(env: dict[str, str], mode: str, init: float, addrs: list[str]
                ) -> dict[str, float]:
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", CHILD, mode, str(init), *addrs], env=env,
                         text=True, capture_output=True, timeout=300)
    wall = (time.perf_counter() - t0) * 1e3
    if run.returncode != 0:
        raise RuntimeError(f"{mode} controller failed:\n{run.stderr}")
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("@@ready "))
    return {"ready": float(line.split(" ", 1)[1]), "process": wall}


def main() -> None:
    """Run the rounds and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--init", type=float, default=0.0, help="seconds each actor's __init__ takes")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    env = {**os.environ, "REGENCY_SECRET": secrets.token_hex(8)}
    workers, addrs = _workers(env, 2)
    rounds: list[dict[str, dict[str, float]]] = []
    try:
        for _ in range(args.runs):
            cold = _controller(env, "cold", args.init, addrs)
            warm = _controller(env, "warm", args.init, addrs)
            rounds.append({"cold": cold, "warm": warm})
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    table: dict[str, Any] = {
        mode: {k: statistics.median(r[mode][k] for r in rounds) for k in ("ready", "process")}
        for mode in ("cold", "warm")}
    table["init_s"] = args.init
    print(f"{{hosts: 2, gpus: 2}}, __init__ {args.init:g} s, median of {args.runs} rounds (ms)")
    for mode in ("cold", "warm"):
        print(f"  {mode:5s} ready {table[mode]['ready']:8.1f}   process "
              f"{table[mode]['process']:8.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"table": table, "rounds": rounds}, f, indent=2)


if __name__ == "__main__":
    main()
