"""Controller dispatch of small tensor ops: regency's tensor engine against Monarch's.

``x = x + 1`` on a 4-rank mesh (``{gpus: 4}``, CPU), 1-element tensors, one fetch at the end;
ops per second from the first op to the fetched value (which checks the count). Each
framework runs in its own interpreter (Monarch from ``.bench-venvs/monarch``), ``--repeat``
times, in the same run; the median is reported.

    .venv/bin/python -m benchmarks.tensor_dispatch [--ops 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MONARCH = ROOT / ".bench-venvs" / "monarch" / "bin" / "python"
if not MONARCH.exists():
    MONARCH = Path("/work/main/.bench-venvs/monarch/bin/python")


def child(framework: str, ops: int) -> None:
    """Run the workload once in this interpreter and print one JSON line."""
    import importlib

    import torch

    actor = importlib.import_module(f"{framework}.actor")
    top = importlib.import_module(framework)
    procs = actor.this_host().spawn_procs(per_host={"gpus": 4})
    with procs.activate():
        x = torch.zeros(1)
        top.fetch_shard(x).result()  # workers up and warm
        for _ in range(200):
            x = x + 1
        top.fetch_shard(x).result()
        start = time.perf_counter()
        for _ in range(ops):
            x = x + 1
        issued = time.perf_counter() - start
        value = top.fetch_shard(x).result()
        total = time.perf_counter() - start
    assert float(value.reshape(-1)[0]) == ops + 200, value
    print(json.dumps({"framework": framework, "ops": ops, "ops_per_s": ops / total,
                      "issue_ops_per_s": ops / issued}), flush=True)
    procs.stop().get() if hasattr(procs.stop(), "get") else None
    os._exit(0)


def run_one(framework: str, ops: int, timeout: float) -> dict[str, float] | None:
    python = sys.executable if framework == "regency" else str(MONARCH)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") if framework == "regency" else "")
    try:
        out = subprocess.run([python, "-m", "benchmarks.tensor_dispatch", "--child", framework,
                              "--ops", str(ops)], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"{framework}: timed out after {timeout}s", file=sys.stderr)
        return None
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)  # type: ignore[no-any-return]
    print(f"{framework}: no result (exit {out.returncode})\n{out.stderr[-2000:]}",
          file=sys.stderr)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", choices=["regency", "monarch"])
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--frameworks", default="regency,monarch")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.ops)
        return
    medians: dict[str, float] = {}
    for fw in args.frameworks.split(","):
        if fw == "monarch" and not MONARCH.exists():
            print("monarch: no .bench-venvs/monarch; skipped", file=sys.stderr)
            continue
        runs = [r for r in (run_one(fw, args.ops, args.timeout) for _ in range(args.repeat))
                if r is not None]
        if runs:
            medians[fw] = statistics.median(r["ops_per_s"] for r in runs)
            print(f"{fw:8s} median {medians[fw]:>10,.0f} ops/s  runs: "
                  + ", ".join(f"{r['ops_per_s']:,.0f}" for r in runs)
                  + "  (issue only: "
                  + ", ".join(f"{r['issue_ops_per_s']:,.0f}" for r in runs) + ")")
    if "regency" in medians and "monarch" in medians:
        print(f"regency / monarch: {medians['regency'] / medians['monarch']:.1f}x")


if __name__ == "__main__":
    main()
