"""Run the whole suite again and again with CPU-bound processes beside it (``make test-stress``).

A test that passes on an idle machine but waits on timing rather than on an event fails
here sooner or later: each run starts ``--burners`` processes (default 2, as many as the
cores of a small CI machine) that spin forever, runs pytest, and stops them, whatever
happened (a failure, Ctrl-C). Runs repeat ``--runs`` times (default 10) and stop at the
first that fails, unless ``--keep-going``. Each run prints one line; the end, which tests
failed in how many runs.

    python tests/stress.py [--runs N] [--burners N] [--keep-going] [-- PYTEST ARGS]

Arguments after ``--`` go to pytest (default: ``tests``). The exit status is 0 when every
run passed.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BURN = "while True: pass"


@dataclass
class Run:
    """The outcome of one pytest run under load."""

    number: int
    status: int
    seconds: float
    counts: dict[str, int] = field(default_factory=dict)  # passed, failed, error, skipped
    failed: dict[str, str] = field(default_factory=dict)  # test id -> "failed" / "error"

    @property
    def ok(self) -> bool:
        return self.status == 0


@contextmanager
def burning(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` processes spinning on a core each for as long as the block runs; stopped
    (killed and reaped) when it ends, however it ends."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", BURN],
                                          stdin=subprocess.DEVNULL))
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def outcomes(report: Path) -> tuple[dict[str, int], dict[str, str]]:
    """Counts by outcome and the failed or erroring test ids, from a JUnit XML report."""
    counts: collections.Counter[str] = collections.Counter()
    failed: dict[str, str] = {}
    try:
        tree = ET.parse(report)
    except (OSError, ET.ParseError):
        return {}, failed
    for case in tree.iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        name = f"{module}.py::{case.get('name', '?')}"
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            counts["failed"] += 1
            failed[name] = "failed"
        elif "error" in kinds:
            counts["error"] += 1
            failed[name] = "error"
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return dict(counts), failed


def run_once(number: int, burners: int, pytest_args: list[str], scratch: Path) -> Run:
    """One pytest run of ``pytest_args`` with ``burners`` spinning processes beside it."""
    report = scratch / f"run-{number}.xml"
    log = scratch / f"run-{number}.log"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           f"--junitxml={report}", *pytest_args]
    start = time.monotonic()
    with burning(burners), open(log, "wb") as out:
        status = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                check=False).returncode
    counts, failed = outcomes(report)
    return Run(number, status, time.monotonic() - start, counts, failed)


def describe(run: Run, runs: int, log: Path) -> str:
    """One line for one run."""
    counts = ", ".join(f"{n} {k}" for k, n in sorted(run.counts.items())) or "no report"
    head = f"run {run.number}/{runs}: {'passed' if run.ok else 'FAILED'} ({counts}) " \
           f"in {run.seconds:.0f} s"
    if run.ok:
        return head
    lines = [head + f", pytest exit status {run.status}, log {log}"]
    lines += [f"    {kind}: {name}" for name, kind in sorted(run.failed.items())]
    return "\n".join(lines)


def summary(done: list[Run]) -> str:
    """Which tests failed in how many of the runs."""
    passed = sum(r.ok for r in done)
    lines = [f"stress: {passed} of {len(done)} runs passed"]
    tally = collections.Counter(name for r in done for name in r.failed)
    for name, n in tally.most_common():
        lines.append(f"    {n} of {len(done)} runs: {name}")
    if not tally and passed < len(done):
        lines.append("    (a failed run named no failing test: see its log)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run, print; the exit status says whether every run passed."""
    args = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, rest = args[:cut], args[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=int(os.environ.get("STRESS_RUNS", 10)))
    parser.add_argument("--burners", type=int,
                        default=int(os.environ.get("STRESS_BURNERS", 2)))
    parser.add_argument("--keep-going", action="store_true",
                        help="run every run even after one failed")
    opts = parser.parse_args(args)
    pytest_args = rest or ["tests"]
    scratch = Path(tempfile.mkdtemp(prefix="regency-stress-"))
    print(f"stress: {opts.runs} runs of pytest {' '.join(pytest_args)} with {opts.burners} "
          f"CPU-bound processes beside it; logs in {scratch}", flush=True)
    done: list[Run] = []
    try:
        for number in range(1, opts.runs + 1):
            run = run_once(number, opts.burners, pytest_args, scratch)
            done.append(run)
            print(describe(run, opts.runs, scratch / f"run-{number}.log"), flush=True)
            if not run.ok and not opts.keep_going:
                break
    except KeyboardInterrupt:
        print("stress: interrupted", flush=True)
    print(summary(done), flush=True)
    return 0 if done and len(done) == opts.runs and all(r.ok for r in done) else 1


if __name__ == "__main__":
    sys.exit(main())
