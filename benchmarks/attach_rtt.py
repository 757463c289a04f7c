"""Controller -> actor round trip through a worker host, regency vs Monarch, same run.

Each framework runs its own worker (``run_worker_loop_forever`` on loopback tcp), the
controller attaches with ``attach_to_workers``, spawns one proc there and times sequential
``call_one`` round trips. Runs alternate between the frameworks; the table shows medians.

Run: ``python benchmarks/attach_rtt.py [--runs 3] [--calls 300]`` (Monarch is taken from
``.bench-venvs/monarch``; see ``benchmarks/setup_peers.sh``; it is skipped if missing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT / ".bench-venvs" / "monarch" / "bin" / "python"

SCRIPT = textwrap.dedent('''
    import json, socket, statistics, subprocess, sys, time
    from {fw}.actor import Actor, attach_to_workers, endpoint

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    class Pinger(Actor):
        @endpoint
        def ping(self, x):
            return x

    port = free_port()
    start = ("from {fw}.actor import run_worker_loop_forever; run_worker_loop_forever("
             f"address='tcp://127.0.0.1:{{port}}', ca='trust_all_connections')")
    worker = subprocess.Popen([sys.executable, "-c", start], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        hosts = attach_to_workers(workers=[f"tcp://127.0.0.1:{{port}}"],
                                  ca="trust_all_connections")
        mesh = hosts.spawn_procs(per_host={{"gpus": 1}}).spawn("pinger", Pinger)
        for i in range(50):
            mesh.ping.call_one(i).get(timeout=60)
        lat = []
        for i in range({calls}):
            t = time.perf_counter()
            mesh.ping.call_one(i).get(timeout=60)
            lat.append(time.perf_counter() - t)
        print(json.dumps({{"p50_ms": statistics.median(lat) * 1e3}}), flush=True)
        try:
            hosts.shutdown().get(timeout=20)
        except Exception:
            pass
    finally:
        worker.kill()
        worker.wait()
''')


def run_one(framework: str, python: str, calls: int) -> float | None:
    env = {**os.environ, "REGENCY_SECRET": os.environ.get("REGENCY_SECRET", "bench-secret")}
    code = SCRIPT.format(fw=framework, calls=calls)
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=180,
                             env=env)
    except subprocess.TimeoutExpired:
        return None
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return float(json.loads(line)["p50_ms"])
    print(f"{framework} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    peers = [("regency", sys.executable)]
    if PEER.exists():
        peers.append(("monarch", str(PEER)))
    results: dict[str, list[float]] = {name: [] for name, _ in peers}
    for _ in range(args.runs):
        for name, python in peers:
            value = run_one(name, python, args.calls)
            if value is not None:
                results[name].append(value)
    print("| framework | attach_to_workers round trip p50 (ms), median of runs |")
    print("|---|---|")
    for name, values in results.items():
        shown = f"{statistics.median(values):.3f}" if values else "failed"
        print(f"| {name} | {shown} |")
    if results.get("monarch") and results["regency"]:
        ratio = statistics.median(results["monarch"]) / statistics.median(results["regency"])
        print(f"\nregency is {ratio:.1f}x faster per round trip (same run).")


if __name__ == "__main__":
    main()
