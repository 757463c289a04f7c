"""Benchmark runner: regency vs Monarch vs Ray, one subprocess per framework run.

    python -m benchmarks.run [--peers monarch,ray] [--frameworks regency,monarch,ray]
                             [--repeat N] [--quick] [--only NAME...] [--timeout S]
                             [--json OUT] [--md OUT] [--load N]

Each framework runs with its own interpreter (regency: this one; peers: .bench-venvs/<peer>),
runs are interleaved (regency, monarch, ray, regency, ...), and the markdown table of medians
is printed on stdout. Progress and failures go to stderr; subprocess logs to
benchmarks/results/logs/. ``--load N`` runs N CPU-bound processes beside the whole run (a
busy machine, as in a training job); they are killed at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks._common import WORKLOAD_NAMES, repo_root
from benchmarks._launch import FrameworkRun, interpreter, run_framework
from benchmarks.report import render_report, to_json

ALL_FRAMEWORKS = ("regency", "monarch", "ray")
PEERS = ("monarch", "ray")


def _csv(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in ALL_FRAMEWORKS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown framework(s): {', '.join(unknown)}")
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--peers",
        type=_csv,
        default=list(PEERS),
        help="peer frameworks for the table columns (default: monarch,ray)",
    )
    p.add_argument(
        "--frameworks",
        type=_csv,
        default=None,
        help="frameworks to actually run (default: regency + the peers)",
    )
    p.add_argument("--repeat", type=int, default=3, help="runs per framework (default 3)")
    p.add_argument("--quick", action="store_true", help="fewer iterations (CI smoke run)")
    p.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="workload names or glob patterns, e.g. sync_rtt 'echo_*'",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="hard timeout per workload, seconds (default 300)",
    )
    p.add_argument("--json", type=Path, help="write raw results and medians as JSON here")
    p.add_argument("--md", type=Path, help="also write the markdown report here")
    p.add_argument(
        "--load",
        type=int,
        default=0,
        metavar="N",
        help="run N CPU-bound processes beside the benchmark (default 0: an idle machine)",
    )
    return p.parse_args(argv)


_BURN = "while True: pass"


@contextmanager
def cpu_load(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """N busy-looping processes for the duration of the block; killed on the way out, also on
    an exception or Ctrl-C (each in its own session, so a terminal's signals reach us only)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", _BURN], start_new_session=True,
                                          stdin=subprocess.DEVNULL))
        if procs:
            log(f"load: {n} CPU-bound processes (pids {', '.join(str(p.pid) for p in procs)})")
        yield procs
    finally:
        for proc in procs:
            try:
                proc.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in procs:
            proc.wait()


def select_workloads(patterns: list[str] | None) -> list[str]:
    if not patterns:
        return list(WORKLOAD_NAMES)
    for pat in patterns:
        if not fnmatch.filter(WORKLOAD_NAMES, pat):
            sys.exit(f"--only {pat!r} matches no workload; known: {', '.join(WORKLOAD_NAMES)}")
    return [w for w in WORKLOAD_NAMES if any(fnmatch.fnmatch(w, p) for p in patterns)]


def available(frameworks: list[str]) -> list[str]:
    """Frameworks whose interpreter exists; a note on stderr for each one skipped."""
    found = []
    for fw in frameworks:
        if interpreter(fw).exists():
            found.append(fw)
        else:
            print(
                f"note: skipping {fw}: {interpreter(fw)} not found "
                f"(create it with: bash benchmarks/setup_peers.sh {fw})",
                file=sys.stderr,
            )
    return found


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def report_progress(run: FrameworkRun, rep: int, repeat: int, seconds: float) -> None:
    bad = {w: o for w, o in run.outcomes.items() if o.status != "ok"}
    log(
        f"run {rep}/{repeat} {run.framework}: {len(run.outcomes)} workloads in {seconds:.0f} s"
        + (f", {len(bad)} failed" if bad else "")
    )
    for w, o in bad.items():
        first = o.detail.strip().splitlines()[0][:200] if o.detail.strip() else ""
        log(f"  {w}: {o.status}: {first}")


def run_all(
    frameworks: list[str], workloads: list[str], args: argparse.Namespace, log_dir: Path
) -> dict[str, list[FrameworkRun]]:
    by_fw: dict[str, list[FrameworkRun]] = {fw: [] for fw in frameworks}
    for rep in range(1, args.repeat + 1):
        for fw in frameworks:  # interleaved: regency, monarch, ray, regency, ...
            start = time.perf_counter()
            run = run_framework(
                fw,
                workloads,
                quick=args.quick,
                timeout_s=args.timeout,
                log_path=log_dir / f"{fw}-run{rep}.log",
            )
            report_progress(run, rep, args.repeat, time.perf_counter() - start)
            by_fw[fw].append(run)
    return by_fw


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workloads = select_workloads(args.only)
    wanted = args.frameworks or ["regency", *args.peers]
    frameworks = available([fw for fw in ALL_FRAMEWORKS if fw in wanted])
    if not frameworks:
        sys.exit("nothing to run")
    peers = [fw for fw in ALL_FRAMEWORKS if fw != "regency" and fw in wanted]
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    log_dir = Path(repo_root()) / "benchmarks" / "results" / "logs" / stamp
    log_dir.mkdir(parents=True, exist_ok=True)
    log(
        f"frameworks={','.join(frameworks)} workloads={len(workloads)} repeat={args.repeat} "
        f"quick={args.quick} load={args.load} logs={log_dir}"
    )
    with cpu_load(args.load):
        by_fw = run_all(frameworks, workloads, args, log_dir)
    meta = {
        "date": dt.date.today().isoformat(),
        "repeat": args.repeat,
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
        "workloads": workloads,
        "timeout_s": args.timeout,
        "load": args.load,
    }
    report = render_report(by_fw, workloads, peers, meta)
    print(report)
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(to_json(by_fw, workloads, meta), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
