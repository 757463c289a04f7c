"""Code sync: first sync of a 100 MB tree of 10,000 files to 2 hosts, then one changed file.

    .venv/bin/python benchmarks/code_sync.py                     # 10,000 x 10 KB, 2 hosts
    .venv/bin/python benchmarks/code_sync.py --files 1000 --hosts 4 --json out.json

Each host is a ``regency worker`` on loopback with its own workspace root. Figures:
``first`` (nothing on the hosts), ``noop`` (nothing changed), ``one`` (one file changed:
only it travels; target < 0.5 s). Seconds, wall clock, one run each (the tree is made once).
Monarch's rsync-based sync failed on this machine (see the reference), so no peer column.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SECRET = "code-sync-bench"
os.environ["REGENCY_SECRET"] = SECRET


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    """Make the tree, start the hosts, sync three times, print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=10_000)
    p.add_argument("--size", type=int, default=10_000, help="bytes per file")
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    from regency.actor import attach_to_workers
    from regency.workspace import Workspace

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "tree"
        for i in range(args.files):
            d = src / f"d{i // 100:03d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"f{i:05d}.bin").write_bytes(os.urandom(args.size))
        workers, addrs = [], []
        for h in range(args.hosts):
            port = _port()
            env = dict(os.environ, REGENCY_WORKSPACE_DIR=f"{tmp}/host{h}")
            w = subprocess.Popen([sys.executable, "-m", "regency", "worker", "--listen",
                                  f"tcp://127.0.0.1:{port}"], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            assert w.stdout is not None and "listening" in w.stdout.readline()
            workers.append(w)
            addrs.append(f"tcp://127.0.0.1:{port}")
        try:
            hosts = attach_to_workers(addrs)
            ws = Workspace(dirs=[str(src)])
            times, reports = {}, {}
            for label in ("first", "noop", "one"):
                if label == "one":
                    (src / "d000" / "f00000.bin").write_bytes(os.urandom(args.size))
                t0 = time.perf_counter()
                reports[label] = asyncio.run(hosts.sync_workspace(ws))
                times[label] = time.perf_counter() - t0
            hosts.shutdown().get(timeout=30)
        finally:
            for w in workers:
                w.kill()
                w.wait()
    mb = args.files * args.size / 1e6
    print(f"code sync: {args.files} files, {mb:.0f} MB, {args.hosts} hosts")
    for label, t in times.items():
        r = reports[label]
        print(f"  {label:6s} {t:7.3f} s   files sent per host {r['files']}, "
              f"bytes {r['bytes']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seconds": times, "reports": reports}, f, indent=2)


if __name__ == "__main__":
    main()
