"""Is the dashboard and ``regency top`` responsive on a big job? Real wall-clock figures.

    .venv/bin/python benchmarks/dashboard.py                       # 256 procs x 4 actors
    .venv/bin/python benchmarks/dashboard.py --procs 128 --seconds 20

It starts a real job (``benchmarks/_dashboard_job.py``: PROCS procs, ACTORS actor meshes on
them, recording and serving its dashboard, every actor called about five times a second),
waits until the API's tree holds every proc and actor, then measures:

* the API: each request the dashboard makes each second, its time and size;
* the dashboard in headless Chromium driven over the DevTools pipe, in real time (no
  virtual time): the **page load**, from navigation start to the first full render (the
  page's ``performance.now()`` once the tree, with every row, is drawn and painted), over
  ``--loads`` fresh loads; then, for ``--seconds``, each 1 s refresh: API answers, drawing,
  and the spacing of refreshes;
* ``regency top`` in tmux: the time from starting the command to the first screen showing
  the tree (Python and textual starting included), each refresh (API and drawing, as top
  shows it in its header) and a key's answer (selecting a proc shows its details).

Everything runs on this machine, beside the job; the load average is printed with the
figures, since a busy machine slows them all.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from benchmarks._cdp import CHROMIUM, Browser  # noqa: E402

#: what --job-env suggests for a loaded machine (not the default: figures use the defaults)
PATIENT = ["REGENCY_HANDSHAKE_MAX_PER_SOURCE=1024", "REGENCY_HANDSHAKE_TIMEOUT=60"]
ENDPOINTS = ("summary", "tree?log_tail=0", "calls?limit=2000&fields=start_us,end_us,proc,ok",
             "events?limit=300", "throughput?window_s=60", "logs?limit=200")


class JobRun:
    """The benchmark's job, up to READY; ``stop()`` ends it."""

    def __init__(self, folder: str, procs: int, actors: int, timeout: float,
                 extra_env: dict[str, str] | None = None) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "_dashboard_job.py"), folder, str(procs), str(actors)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, cwd=folder)
        self.err: list[str] = []
        threading.Thread(target=self._drain_err, daemon=True).start()
        self.spawn_s = float("nan")
        killer = threading.Timer(timeout, self.proc.kill)
        killer.start()
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                if line.startswith("SPAWNED "):
                    self.spawn_s = float(line.split()[1])
                if line.startswith("READY"):
                    break
            else:
                raise RuntimeError(f"the job ended before it was ready (exit "
                                   f"{self.proc.wait()}):\n" + "".join(self.err[-40:]))
        finally:
            killer.cancel()
        threading.Thread(target=lambda: self.proc.stdout.read(),  # type: ignore[union-attr]
                         daemon=True).start()
        [info] = Path(folder).glob("*.json")
        self.info: dict[str, Any] = json.loads(info.read_text())

    def _drain_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
                self.proc.wait(300)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


class Simulated:
    """A job's database made up (PROCS procs x ACTORS actors, a minute of calls, counts and
    logs), served by ``regency dashboard`` in a process of its own: the drawing side at a
    size the machine cannot spawn. Not a substitute for the real job's figures."""

    def __init__(self, folder: str, procs: int, actors: int) -> None:
        from regency._observe._recorder import now_us
        from regency._observe._retention import Retention
        from regency._observe._store import Store

        path = os.path.join(folder, "simulated.db")
        store = Store(path, Retention())
        now = now_us()
        rows: list[Any] = [("job", ("job", "simulated")),
                           ("proc_up", ("unix:@sim-root", "root", "controller", 0, "vm", 1, now))]
        for r in range(procs):
            addr = f"unix:@sim-trainers-{r}"
            rows += [("proc_up", (addr, "trainers", "trainers", r, "vm", 1000 + r, now)),
                     ("proc_sample", (now, 2.0, 45 << 20, addr))]
            for k in range(actors):
                actor = f"workers{k}{{'procs': {r}}}"
                rows += [("actor_up", (actor, f"workers{k}", f"workers{k}", "__main__.Worker",
                                       f"{{'procs': {r}}}", addr, now)),
                         ("actor_sample", (now, 0, 100, 3.0, actor))]
        for t in range(60):  # a minute of traffic: counts, 200 calls and 20 lines a second
            ts = now - (60 - t) * 1_000_000
            for r in range(procs):
                for k in range(actors):
                    rows.append(("call_counts", (ts, f"unix:@sim-trainers-{r}",
                                                 f"workers{k}{{'procs': {r}}}", f"workers{k}",
                                                 "step", 3, 3)))
            for i in range(200):
                r = i % procs
                rows.append(("calls", (ts + i * 5000, ts + i * 5000 + 300,
                                       f"unix:@sim-trainers-{r}", f"workers0{{'procs': {r}}}",
                                       "root", "workers0", "step", 64, 1)))
            for i in range(20):
                rows.append(("logs", (ts + i, f"unix:@sim-trainers-{(t * 20 + i) % procs}",
                                      "trainers", "stdout", f"step {t} done")))
        store.put(rows)
        store.flushed(120)
        store.close()
        self.proc = subprocess.Popen([sys.executable, "-m", "regency", "dashboard", "--job", path],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        url, _, token = line.split()[2].partition("/#token=")
        self.info = {"url": url, "token": token}
        self.spawn_s = 0.0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def api_get(info: dict[str, Any], path: str) -> tuple[float, int, Any]:
    """(seconds, bytes, decoded answer) of one API request."""
    req = urllib.request.Request(f"{info['url']}/api/v1/{path}",
                                 headers={"Authorization": f"Bearer {info['token']}"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read()
    return time.perf_counter() - t0, len(body), json.loads(body)


def wait_full_tree(info: dict[str, Any], procs: int, actors: int, timeout: float) -> int:
    """Wait until the tree has every proc and actor, sampled; returns its row count."""
    deadline = time.monotonic() + timeout
    while True:
        _, _, tree = api_get(info, "tree?log_tail=0")
        ps = [p for h in tree["hosts"] for p in h["procs"] if p["mesh_name"] == "trainers"]
        n_actors = sum(len(p["actors"]) for p in ps)
        if len(ps) == procs and n_actors == procs * actors and all(p["rss"] for p in ps):
            return len(tree["hosts"]) + sum(len(h["procs"]) for h in tree["hosts"]) + n_actors
        if time.monotonic() > deadline:
            raise TimeoutError(f"the tree has {len(ps)} procs and {n_actors} actors after "
                               f"{timeout}s")
        time.sleep(0.5)


def stats(values: list[float]) -> str:
    if not values:
        return "n/a"
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
    return (f"median {statistics.median(values):7.1f}  p90 {p90:7.1f}  max {values[-1]:7.1f}"
            f"  (n={len(values)})")


def measure_api(info: dict[str, Any], rounds: int) -> list[str]:
    lines = []
    for path in ENDPOINTS:
        times, size = [], 0
        for _ in range(rounds):
            t, size, _ = api_get(info, path)
            times.append(1000 * t)
        lines.append(f"  {path.split('?')[0]:11} {size / 1024:7.0f} KiB  ms: {stats(times)}")
    return lines


def measure_dashboard(info: dict[str, Any], rows: int, loads: int, seconds: float,
                      profile: str) -> list[str]:
    url = f"{info['url']}/#token={info['token']}"
    browser = Browser(profile)
    out = []
    try:
        first, wall = [], []
        parts: dict[str, list[float]] = {"page and script loaded": [], "API answers": [],
                                         "drawing": [], "layout and paint": []}
        for _ in range(loads):
            browser.navigate("about:blank")
            browser.wait_for("location.href === 'about:blank'")
            t0 = time.perf_counter()
            browser.navigate(url)
            ms = browser.wait_for("document.body && document.body.dataset.firstRenderMs", 120)
            wall.append(1000 * (time.perf_counter() - t0))
            first.append(float(ms))
            t = browser.evaluate("window.regencyTimings[0]")
            parts["page and script loaded"].append(t["at"])
            parts["API answers"].append(t["fetch"])
            parts["drawing"].append(t["render"])
            parts["layout and paint"].append(float(ms) - t["at"] - t["total"])
            shown = int(browser.evaluate("document.body.dataset.treeRows"))
            if shown != rows:
                raise AssertionError(f"the first render had {shown} rows, not {rows}")
        drawn = browser.evaluate("document.body.dataset.treeDrawn")
        out.append(f"  page load (navigation -> tree of {rows} rows drawn, rows {drawn} in the "
                   f"document, painted), ms: {stats(first)}")
        out.append(f"    as seen from outside (navigate call -> mark seen), ms: {stats(wall)}")
        for name, values in parts.items():
            out.append(f"    of which {name:23} {stats(values)}")
        t0 = time.perf_counter()  # scrolling to the end draws the last rows
        browser.evaluate("(() => { const d = document.getElementById('tree-scroll'); "
                         "d.scrollTop = d.scrollHeight; })()")
        browser.wait_for(f"document.body.dataset.treeDrawn.endsWith('-{rows}')", 60)
        out.append(f"  scroll to the end of the tree -> its last rows drawn: "
                   f"{1000 * (time.perf_counter() - t0):.0f} ms")
        browser.evaluate("window.regencyTimings.length = 0")
        time.sleep(seconds)
        timings = browser.evaluate("window.regencyTimings")
        starts = [t["at"] for t in timings]
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        out.append(f"  refresh ({len(timings)} in {seconds:.0f} s), ms:")
        out.append(f"    API answers (6 requests at once) {stats([t['fetch'] for t in timings])}")
        out.append(f"    drawing                          {stats([t['render'] for t in timings])}")
        out.append(f"    total                            {stats([t['total'] for t in timings])}")
        out.append(f"    start to start                   {stats(gaps)}")
    finally:
        browser.close()
    return out


class Tmux:
    def __init__(self) -> None:
        self.socket = f"regency-bench-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True,
                              text=True, timeout=20).stdout


def measure_top(info: dict[str, Any], starts: int, seconds: float) -> list[str]:
    tmux = Tmux()
    first, keys, updates = [], [], []
    cmd = (f"env -u COLUMNS -u LINES {sys.executable} -m regency top --url {info['url']} "
           f"--token={info['token']} --interval 1")
    try:
        for i in range(starts):
            session = f"top{i}"
            t0 = time.perf_counter()
            tmux("new-session", "-d", "-s", session, "-x", "200", "-y", "50", cmd)

            def screen(s: str = session) -> str:
                return tmux("capture-pane", "-p", "-t", s)

            _until(lambda: "trainers rank 1" in screen() and "workers0" in screen(), 120)
            first.append(1000 * (time.perf_counter() - t0))
            t1 = time.perf_counter()
            tmux("send-keys", "-t", session, "Down")
            _until(lambda: "address unix:" in screen(), 60)
            keys.append(1000 * (time.perf_counter() - t1))
            if i == starts - 1:
                end = time.monotonic() + seconds
                seen: set[str] = set()
                while time.monotonic() < end:
                    for found in re.findall(r"updated in (\d+) ms", screen()):
                        seen.add(found)
                        updates.append(float(found))
                    time.sleep(1.0)
            tmux("send-keys", "-t", session, "q")
            _until(lambda s=session: s not in tmux("list-sessions"), 30)
    finally:
        tmux("kill-server")
    return [f"  first full screen (command start -> tree shown), ms: {stats(first)}",
            f"  a key (Down -> the proc's details shown), ms: {stats(keys)}",
            f"  refresh (API and drawing, as its header shows), ms: {stats(updates)}"]


def _until(check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("timed out")
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", default="256",
                        help="procs, or sizes to try in order until one spawns: 256,192,128")
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--loads", type=int, default=5, help="page loads measured")
    parser.add_argument("--seconds", type=float, default=15, help="refreshes watched")
    parser.add_argument("--top-starts", type=int, default=3)
    parser.add_argument("--spawn-timeout", type=float, default=900)
    parser.add_argument("--job-env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment for the job, e.g. " + " ".join(PATIENT) + ". On a "
                        "loaded 2-core machine (load average above about 50) some of 256 procs "
                        "starting at once may time out connecting to their host agent and exit "
                        "0, failing the spawn (a known bug); --procs 256,192,128 falls back")
    parser.add_argument("--simulate", action="store_true",
                        help="no job: a made-up database of that size, served by "
                        "`regency dashboard` (the drawing side only)")
    args = parser.parse_args()
    job: JobRun | Simulated | None = None
    job_env = dict(p.split("=", 1) for p in args.job_env)
    if args.simulate:
        args.procs = int(args.procs.split(",")[0])
        folder = tempfile.mkdtemp(prefix="regency-dash-bench-")
        print(f"SIMULATED database of {args.procs} procs x {args.actors} actors, served by "
              f"`regency dashboard` ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} "
              f"cores, load average {os.getloadavg()[0]:.1f})", flush=True)
        job = Simulated(folder, args.procs, args.actors)
    for procs in [] if args.simulate else [int(n) for n in args.procs.split(",")]:
        args.procs = procs
        folder = tempfile.mkdtemp(prefix="regency-dash-bench-")
        print(f"dashboard and top with {procs} procs x {args.actors} actors "
              f"({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.1f}; job environment: "
              f"{' '.join(f'{k}={v}' for k, v in job_env.items()) or 'as is'})", flush=True)
        try:
            job = JobRun(folder, procs, args.actors, args.spawn_timeout, job_env)
            break
        except RuntimeError as exc:
            print(f"  could not start {procs} procs: "
                  + "\n    ".join(str(exc).splitlines()[:8]), flush=True)
            shutil.rmtree(folder, ignore_errors=True)
    if job is None:
        return 1
    try:
        print(f"  spawned in {job.spawn_s:.1f} s", flush=True)
        rows = wait_full_tree(job.info, args.procs, args.actors, 300)
        print(f"  the tree has {rows} rows", flush=True)
        print("API (one request at a time):", flush=True)
        print("\n".join(measure_api(job.info, 10)), flush=True)
        if Path(CHROMIUM).exists():
            print("dashboard (headless Chromium, real time):", flush=True)
            print("\n".join(measure_dashboard(job.info, rows, args.loads, args.seconds,
                                              os.path.join(folder, "profile"))), flush=True)
        else:
            print(f"dashboard: skipped ({CHROMIUM} is not installed)")
        if shutil.which("tmux"):
            print("regency top (tmux, 200x50):", flush=True)
            print("\n".join(measure_top(job.info, args.top_starts, args.seconds)), flush=True)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        job.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
