"""How fast failures are noticed, and how fast orphans go: regency vs Monarch, same run.

    .venv/bin/python benchmarks/supervision.py                 # regency + monarch, 5/3 runs
    .venv/bin/python benchmarks/supervision.py --runs 7 --frameworks regency
    .venv/bin/python benchmarks/supervision.py --json out.json

Figures (each the median of ``--runs`` runs, every run in a fresh controller process):

(a) ``pending``: SIGKILL of a proc -> the exception of a caller blocked in ``.get()`` on a
    call to that proc (``SupervisionError``). Target < 1 s.
(b) ``supervise``: SIGKILL of a proc -> the ``__supervise__`` of the actor that owns its
    mesh is called (the owner lives on another proc; the time is taken there). Target < 1 s.
(c) ``orphans``: SIGKILL of the controller -> the last process it started is gone (procs,
    fork server / host agents: every descendant and every process carrying the run's tag in
    its environment). Target < 5 s.

Monarch runs with its own interpreter (``.bench-venvs/monarch``, see ``benchmarks/README.md``)
and its default configuration (supervision poll every 10 s); ``monarch-poll1s`` is the same
with ``HYPERACTOR_MESH_SUPERVISION_POLL_FREQUENCY=1s``. A framework whose venv is missing is
skipped. The actor classes below are written once against the ``monarch.actor`` API and
bound to the framework named by ``BENCH_FRAMEWORK`` (as in ``benchmarks/_actors.py``).

The table goes to stdout; progress and the children's stderr go to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARK = "@@sup "
TAG_VAR = "REGENCY_SUPERVISION_BENCH_TAG"

VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    # variant -> (framework, extra environment)
    "regency": ("regency", {}),
    "monarch": ("monarch", {}),
    "monarch-poll1s": ("monarch", {"HYPERACTOR_MESH_SUPERVISION_POLL_FREQUENCY": "1s"}),
}
METRICS = {
    "pending": ("(a) proc SIGKILL -> pending caller's exception", 1.0),
    "supervise": ("(b) proc SIGKILL -> owner's `__supervise__` called", 1.0),
    "orphans": ("(c) controller SIGKILL -> last proc gone", 5.0),
}

# -- the actors (imported by procs as benchmarks.supervision) ----------------------------------
_framework = os.environ.get("BENCH_FRAMEWORK", "regency")
api = importlib.import_module(f"{_framework}.actor")
Actor = api.Actor
endpoint = api.endpoint


class Sleeper(Actor):
    """A worker that can be made to wait."""

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def sleep(self, seconds: float) -> str:
        time.sleep(seconds)
        return "slept"


class Owner(Actor):
    """Spawns a mesh of Sleepers on procs of its own; notes when ``__supervise__`` runs."""

    def __init__(self) -> None:
        self.supervised_at: float | None = None
        self.first: str = ""

    @endpoint
    def start(self, n: int) -> list[int]:
        self.procs = api.this_host().spawn_procs(per_host={"procs": n})
        self.workers = self.procs.spawn("workers", Sleeper)
        return list(self.workers.pid.call().get().values())

    @endpoint
    def supervised(self) -> tuple[float | None, str]:
        return self.supervised_at, self.first

    def __supervise__(self, failure: Any) -> bool:
        if self.supervised_at is None:
            self.supervised_at = time.time()
            self.first = str(failure)[:200]
        return True


# -- one measurement per child process -------------------------------------------------------
def _result_channel() -> Any:
    """Keep the real stdout for results; send fd 1 (procs' output too) to stderr."""
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(fd, "w", buffering=1)


def _quiet_hook() -> list[Any]:
    """Replace the root's fault hook: the controller must outlive the failure we cause."""
    seen: list[Any] = []
    mod = sys.modules[f"{_framework}.actor"]
    mod.unhandled_fault_hook = seen.append  # type: ignore[attr-defined]
    return seen


def child_pending(out: Any) -> None:
    from benchmarks import supervision as mod

    _quiet_hook()
    procs = api.this_host().spawn_procs(per_host={"procs": 2})
    workers = procs.spawn("sleepers", mod.Sleeper)
    pids = list(workers.pid.call().get().values())
    victim = workers.slice(procs=1)
    pending = victim.sleep.call_one(120)
    killed: list[float] = []

    def kill() -> None:
        killed.append(time.monotonic())
        os.kill(pids[1], 9)

    timer = threading.Timer(0.3, kill)  # the main thread is blocked in get() by then
    timer.start()
    try:
        pending.get(timeout=120)
        error = "the call returned"
    except Exception as exc:  # noqa: BLE001 - SupervisionError (any framework's)
        error = f"{type(exc).__name__}: {str(exc)[:150]}"
    done = time.monotonic()
    timer.join()
    out.write(MARK + json.dumps({"seconds": done - killed[0], "detail": error}) + "\n")
    out.flush()
    os._exit(0)  # do not time the framework's shutdown after a failure


def child_supervise(out: Any) -> None:
    from benchmarks import supervision as mod

    _quiet_hook()
    procs = api.this_host().spawn_procs(per_host={"owner": 1})
    owner = procs.spawn("owner", mod.Owner)
    pids = owner.start.call_one(2).get()
    killed = time.time()
    os.kill(pids[1], 9)
    deadline = time.monotonic() + 120
    at, first = None, ""
    while time.monotonic() < deadline:
        at, first = owner.supervised.call_one().get()
        if at is not None:
            break
        time.sleep(0.01)
    result = ({"seconds": at - killed, "detail": first} if at is not None
              else {"error": "__supervise__ was not called within 120 s"})
    out.write(MARK + json.dumps(result) + "\n")
    out.flush()
    os._exit(0)


def child_orphans(out: Any) -> None:
    from benchmarks import supervision as mod

    procs = api.this_host().spawn_procs(per_host={"procs": 4})
    workers = procs.spawn("sleepers", mod.Sleeper)
    pids = list(workers.pid.call().get().values())
    out.write(MARK + json.dumps({"ready": True, "pids": pids}) + "\n")
    out.flush()
    time.sleep(600)


CHILDREN = {"pending": child_pending, "supervise": child_supervise, "orphans": child_orphans}


# -- the driver -------------------------------------------------------------------------------
def interpreter(framework: str) -> Path:
    if framework == "regency":
        venv = ROOT / ".venv" / "bin" / "python"
        return venv if venv.exists() else Path(sys.executable)
    return ROOT / ".bench-venvs" / framework / "bin" / "python"


def child_env(variant: str, tag: str) -> dict[str, str]:
    framework, extra = VARIANTS[variant]
    paths = [str(ROOT)] + ([str(ROOT / "src")] if framework == "regency" else [])
    old = os.environ.get("PYTHONPATH")
    env = {**os.environ, **extra, "BENCH_FRAMEWORK": framework, "PYTHONUNBUFFERED": "1",
           TAG_VAR: tag, "PYTHONPATH": os.pathsep.join(paths + ([old] if old else []))}
    return env


def _tagged(tag: str) -> list[int]:
    import psutil

    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(TAG_VAR) == tag:
                found.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _reap(tag: str) -> None:
    """Kill whatever a child left (only processes carrying this run's tag)."""
    for pid in _tagged(tag):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def _start(variant: str, metric: str, tag: str) -> subprocess.Popen[str]:
    framework = VARIANTS[variant][0]
    cmd = [str(interpreter(framework)), "-m", "benchmarks.supervision", "--child", metric]
    return subprocess.Popen(cmd, cwd=ROOT, env=child_env(variant, tag), text=True,
                            stdout=subprocess.PIPE, stderr=sys.stderr)


def _read_result(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    box: list[dict[str, Any]] = []

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(MARK):
                box.append(json.loads(line[len(MARK):]))
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    return box[0] if box else {"error": f"no result within {timeout:.0f} s"}


def measure_once(variant: str, metric: str, timeout: float) -> dict[str, Any]:
    tag = uuid.uuid4().hex
    proc = _start(variant, metric, tag)
    try:
        result = _read_result(proc, timeout)
        if metric != "orphans" or "error" in result:
            return result
        import psutil

        family = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        family |= set(_tagged(tag)) - {proc.pid}
        killed = time.monotonic()
        os.kill(proc.pid, 9)
        proc.wait()
        deadline = killed + 30
        while time.monotonic() < deadline:
            left = [p for p in family if _alive(p)]
            if not left:
                return {"seconds": time.monotonic() - killed,
                        "detail": f"{len(family)} processes"}
            time.sleep(0.005)
        return {"error": f"{len(left)} of {len(family)} processes still alive after 30 s"}
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        _reap(tag)


def fmt(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--frameworks", default="regency,monarch,monarch-poll1s",
                        help="variants to run: regency, monarch, monarch-poll1s")
    parser.add_argument("--metrics", default="pending,supervise,orphans")
    parser.add_argument("--runs", type=int, default=5, help="runs per figure for regency")
    parser.add_argument("--peer-runs", type=int, default=3, help="runs per figure for peers")
    parser.add_argument("--timeout", type=float, default=90.0, help="per run, seconds")
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args(argv)
    if args.child:
        CHILDREN[args.child](_result_channel())
        return 0

    variants = [v.strip() for v in args.frameworks.split(",") if v.strip()]
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    notes: list[str] = []
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for variant in list(variants):
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}")
        if not interpreter(VARIANTS[variant][0]).exists():
            notes.append(f"{variant}: skipped, no interpreter at "
                         f"{interpreter(VARIANTS[variant][0])}")
            variants.remove(variant)
    for metric in metrics:
        for variant in variants:
            runs = args.runs if variant == "regency" else args.peer_runs
            for i in range(runs):
                print(f"[supervision] {variant} {metric} run {i + 1}/{runs}", file=sys.stderr,
                      flush=True)
                result = measure_once(variant, metric, args.timeout)
                print(f"[supervision]   -> {result}", file=sys.stderr, flush=True)
                raw.setdefault(variant, {}).setdefault(metric, []).append(result)

    header = "| figure | target | " + " | ".join(variants) + " |"
    lines = [header, "|" + "---|" * (2 + len(variants))]
    for metric in metrics:
        title, target = METRICS[metric]
        cells = []
        for variant in variants:
            results = raw.get(variant, {}).get(metric, [])
            ok = [r["seconds"] for r in results if "seconds" in r]
            if not ok:
                cells.append("error")
                errors = {r.get("error", "?") for r in results}
                notes.append(f"{variant} {metric}: " + "; ".join(sorted(errors)))
                continue
            med = statistics.median(ok)
            cell = f"{fmt(med)} (n={len(ok)}, {fmt(min(ok))}-{fmt(max(ok))})"
            if len(ok) < len(results):
                cell += f" ({len(ok)}/{len(results)} ok)"
            if variant == "regency":
                cell = ("**" + cell + "**") if med < target else cell + " MISSED"
            cells.append(cell)
        lines.append(f"| {title} | < {target:g} s | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    print()
    print("Medians over fresh controller processes; (n, min-max) per cell. "
          f"{os.cpu_count()} CPUs.")
    for note in notes:
        print(f"* {note}")
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
