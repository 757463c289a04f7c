"""Workload subprocess: runs some workloads of ONE framework and reports them as events.

    python -m benchmarks._child --framework {regency,monarch,ray} [--quick] --workloads a,b,c

Run by ``benchmarks.run`` with that framework's interpreter. Results go to the original
stdout as ``@@bench {json}`` lines (events ``ready``, ``start``, ``result``, ``error``); fd 1
is then pointed at stderr, so output from the framework or from worker procs that inherit fd
1 can neither corrupt the result channel nor keep it open after this process exits.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from types import ModuleType
from typing import IO

from benchmarks._common import EventWriter, params_for

FRAMEWORKS = ("regency", "monarch", "ray")


def open_result_channel() -> IO[str]:
    """Keep the real stdout (as a close-on-exec fd) for events; send fd 1 to stderr."""
    sys.stdout.flush()
    fd = os.dup(1)  # dup() returns a non-inheritable fd, so children never see it
    os.dup2(2, 1)
    return os.fdopen(fd, "w", buffering=1)


def load_module(framework: str) -> ModuleType:
    os.environ["BENCH_FRAMEWORK"] = framework  # read by _actors in this proc and its children
    name = "benchmarks.workloads_ray" if framework == "ray" else "benchmarks.workloads_actor"
    return importlib.import_module(name)


def run_one(module: ModuleType, name: str, quick: bool, out: EventWriter) -> None:
    out.emit("start", name)
    start = time.perf_counter()
    try:
        metrics = module.WORKLOADS[name](params_for(quick))
    except BaseException as exc:  # includes Monarch's fail-fast KeyboardInterrupt
        traceback.print_exc()
        out.emit("error", name, error=f"{type(exc).__name__}: {exc}"[:600])
        if isinstance(exc, KeyboardInterrupt):
            raise
        return
    out.emit("result", name, metrics=metrics, seconds=time.perf_counter() - start)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--framework", choices=FRAMEWORKS, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workloads", required=True, help="comma-separated workload names")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = EventWriter(open_result_channel())
    module = load_module(args.framework)
    version = module.setup()
    out.emit("ready", "*", version=version, python=sys.version.split()[0], pid=os.getpid())
    for name in args.workloads.split(","):
        run_one(module, name, args.quick, out)
    module.teardown()
    out.emit("done", "*")
    return 0


if __name__ == "__main__":
    sys.exit(main())
