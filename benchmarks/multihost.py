"""Multi-host benchmarks on one machine: hosts are network namespaces joined by a bridge.

    sudo .venv/bin/python benchmarks/multihost.py [--quick] [--md OUT]

Prints a markdown table:

* **round trip**: a sync ``call_one().get()`` from the controller to one actor, the same
  benchmark three ways: across namespaces (controller and worker in different namespaces,
  TCP over veth + bridge), on one host (controller and worker in one namespace, TCP over
  loopback), and ``this_host()`` procs (no worker; Unix sockets);
* **lost-host detection**: time from cutting a host's link (``ip link set down``) to the
  controller's pending call failing with ``SupervisionError``, with the default liveness
  knobs (heartbeat 0.5 s, host lost after 3 s) and with faster ones;
* **broadcast + gather**: ``call().get()`` of a small endpoint over 16 procs, on 1, 2 and
  4 hosts.

It needs root and ``ip netns`` (the test network of ``tests/system/_netns.py``); otherwise it
says why and exits 0. Traffic stays inside the namespaces it creates.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PORT = 26600
SECRET = "multihost-benchmark"


# -- the controller side (this file run with --controller, in some namespace) -----------------
def controller(args: list[str]) -> int:  # pragma: no cover - runs in a subprocess
    """``--controller SCENARIO JSON``: run one scenario, print one JSON result line."""
    scenario, params = args[0], json.loads(args[1])
    import regency.actor as ra
    from regency.actor import Actor, endpoint

    class Echo(Actor):
        @endpoint
        def echo(self, x: Any) -> Any:
            return x

        @endpoint
        def sleep(self, secs: float) -> None:
            time.sleep(secs)

    def emit(**kw: Any) -> None:
        print("@@ " + json.dumps(kw), flush=True)

    ra.unhandled_fault_hook = lambda failure: None  # the lost host is expected here
    if params.get("workers"):
        hosts = ra.attach_to_workers(params["workers"])
        procs = hosts.spawn_procs(per_host={"gpus": params.get("gpus", 1)})
    else:
        hosts = None
        procs = ra.this_host().spawn_procs(per_host={"gpus": params.get("gpus", 1)})
    mesh = procs.spawn("echo", Echo)
    mesh.echo.call(0).get(timeout=60)  # everyone up and connected
    if scenario == "rtt":
        one = mesh.slice(**dict.fromkeys(mesh.extent, 0))
        for _ in range(200):
            one.echo.call_one(1).get()
        times = []
        for i in range(params["n"]):
            t0 = time.perf_counter()
            one.echo.call_one(i).get()
            times.append(time.perf_counter() - t0)
        emit(times=times)
    elif scenario == "bcast":
        for _ in range(20):
            mesh.echo.call(1).get()
        times = []
        for i in range(params["n"]):
            t0 = time.perf_counter()
            got = mesh.echo.call(i).get()
            times.append(time.perf_counter() - t0)
            assert len(got) == 16
        emit(times=times)
    elif scenario == "detect":
        fut = mesh.slice(hosts=1, gpus=0).sleep.call_one(120)
        emit(ready=True)
        try:
            fut.get(timeout=60)
            emit(error=None, t=time.monotonic())
        except Exception as exc:  # noqa: BLE001 - reported
            emit(error=type(exc).__name__, t=time.monotonic())
        os._exit(0)  # the lost host cannot be released; the workers' leases lapse
    if hosts is not None:
        hosts.stop().get(timeout=30)
    return 0


# -- the driver side ---------------------------------------------------------------------------
def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
    env.update({"REGENCY_SECRET": SECRET, "PYTHONUNBUFFERED": "1"}, **extra)
    return env


class Bench:
    def __init__(self, net: Any, logs: Path) -> None:
        self.net = net
        self.logs = logs
        self.workers: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}

    def worker(self, node: str, ip: str) -> str:
        """A worker in ``node``'s namespace listening on ``ip``; its address."""
        addr = f"tcp://{ip}:{PORT}"
        if addr + node in self.workers:
            return addr
        log = self.logs / f"worker-{node}-{ip}.log"
        with open(log, "wb") as out:
            argv = [sys.executable, "-m", "regency", "worker", "--listen", addr]
            proc = self.net.popen(node, argv, stdout=out, stderr=subprocess.STDOUT, env=_env())
        deadline = time.monotonic() + 30
        while "listening on" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker in {node} did not start:\n{log.read_text()}")
            time.sleep(0.02)
        self.workers[addr + node] = (proc, log)
        return addr

    def wait_idle(self, timeout: float = 15.0) -> None:
        """Until every worker is detached from its last controller."""
        deadline = time.monotonic() + timeout
        for _proc, log in self.workers.values():
            while True:
                text = log.read_text(errors="replace")
                if text.count("serving controller") <= text.count("ready for the next"):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"a worker stayed attached:\n{text[-2000:]}")
                time.sleep(0.05)

    def run(self, node: str | None, scenario: str, params: dict[str, Any],
            env: dict[str, str] | None = None, on_ready: Any = None) -> dict[str, Any]:
        argv = [sys.executable, str(Path(__file__).resolve()), "--controller", scenario,
                json.dumps(params)]
        full = _env(**(env or {}))
        if node is None:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=full, text=True)
        else:
            proc = self.net.popen(node, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=full, text=True)
        err: list[str] = []
        threading.Thread(target=lambda: err.extend(proc.stderr or []), daemon=True).start()
        result: dict[str, Any] = {}
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith("@@ "):
                continue
            msg = json.loads(line[3:])
            if msg.get("ready") and on_ready is not None:
                result["t_fault"] = on_ready()
                continue
            result.update(msg)
        if proc.wait(timeout=120) != 0 or not result:
            raise RuntimeError(f"controller {scenario} failed:\n{''.join(err)[-3000:]}")
        self.wait_idle()
        return result

    def close(self) -> None:
        for proc, _ in self.workers.values():
            proc.kill()
            proc.wait(timeout=10)


def _ms(xs: list[float]) -> str:
    xs = sorted(xs)
    p50 = xs[len(xs) // 2] * 1e3
    p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e3
    return f"{p50:.3f} ms | {p99:.3f} ms"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer iterations")
    p.add_argument("--md", help="also write the table to this file")
    p.add_argument("--controller", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.controller:
        return controller(args.controller)
    sys.path.insert(0, str(ROOT / "tests" / "system"))
    from _netns import netns_problem, test_network

    why = netns_problem()
    if why is not None:
        print(f"multihost benchmark skipped: {why}")
        return 0
    n_rtt, n_bcast, trials = (500, 50, 1) if args.quick else (3000, 300, 3)
    rows: list[str] = []
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"regency-multihost-bench-{os.getpid()}"
    logs.mkdir(parents=True, exist_ok=True)
    with test_network(4) as net:
        b = Bench(net, logs)
        try:
            hosts = [b.worker(h.name, h.ip) for h in net.hosts]
            print("round trips...", file=sys.stderr)
            r = b.run("ctl", "rtt", {"workers": hosts[:1], "n": n_rtt})
            rows.append(f"| round trip, controller → actor across namespaces (TCP, veth+bridge) "
                        f"| {_ms(r['times'])} |")
            local = b.worker("h0", "127.0.0.1")
            r = b.run("h0", "rtt", {"workers": [local], "n": n_rtt})
            rows.append(f"| round trip, same benchmark on one host (worker on loopback TCP) "
                        f"| {_ms(r['times'])} |")
            r = b.run(None, "rtt", {"n": n_rtt})
            rows.append(f"| round trip, `this_host()` procs (no worker, Unix sockets) "
                        f"| {_ms(r['times'])} |")
            print("broadcast + gather...", file=sys.stderr)
            for n_hosts in (1, 2, 4):
                r = b.run("ctl", "bcast", {"workers": hosts[:n_hosts], "gpus": 16 // n_hosts,
                                           "n": n_bcast})
                rows.append(f"| broadcast + gather, 16 procs on {n_hosts} host(s) "
                            f"(`call().get()`) | {_ms(r['times'])} |")
            print("lost-host detection...", file=sys.stderr)
            for label, knobs in (("default: heartbeat 0.5 s, lost after 3 s", {}),
                                 ("heartbeat 0.2 s, lost after 1 s",
                                  {"REGENCY_HEARTBEAT_INTERVAL": "0.2",
                                   "REGENCY_HOST_LOST_TIMEOUT": "1"})):
                took = []
                for _ in range(trials):
                    def cut() -> float:
                        t = time.monotonic()
                        net.cut(1)
                        return t

                    r = b.run("ctl", "detect", {"workers": hosts[:2]}, env=knobs, on_ready=cut)
                    net.restore(1)
                    b.wait_idle()
                    assert r["error"] == "SupervisionError", r
                    took.append(r["t"] - r["t_fault"])
                spread = (f"{min(took):.2f} s … {max(took):.2f} s" if len(took) > 1
                          else f"{took[0]:.2f} s")
                rows.append(f"| lost host detected (link cut → `SupervisionError`), {label} "
                            f"| {statistics.median(took):.2f} s | {spread} |")
        finally:
            b.close()
    table = ["| measurement | p50 / median | p99 / range |", "|---|---|---|", *rows]
    text = "\n".join(table)
    print(text)
    print(f"\n({n_rtt} round trips, {n_bcast} broadcasts, {trials} link cuts per row; "
          f"{os.cpu_count()} CPUs; worker logs in {logs})")
    if args.md:
        Path(args.md).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
