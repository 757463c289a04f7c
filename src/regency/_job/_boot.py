"""The worker bootstrap of batch launchers: ``python -m regency._job._boot``.

Run by ``srun`` once per task: it picks the address of this task's worker, writes it to
``RENDEZVOUS/RANK.json`` (atomically; RANK is ``SLURM_PROCID``) so that the controller can
find every worker, then becomes ``regency worker --listen tcp://BIND:PORT --advertise HOST``.

* PORT is ``--port`` plus ``SLURM_LOCALID`` (so several tasks on one node do not collide),
  or a free port when ``--port 0``;
* HOST is this machine's host name (``--advertise hostname``, the default), its IP address
  (``--advertise ip``), or any name given.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys


def _free_port(bind: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET) as s:
        s.bind((bind, 0))
        return int(s.getsockname()[1])


def _advertised(how: str) -> str:
    if how == "hostname":
        return socket.gethostname()
    if how == "ip":
        try:
            return socket.gethostbyname(socket.getfqdn())
        except OSError:
            return socket.gethostbyname(socket.gethostname())
    return how


def main(argv: list[str] | None = None) -> int:
    """Write the rendezvous entry, then serve as a worker until shut down."""
    p = argparse.ArgumentParser(prog="python -m regency._job._boot", description=__doc__)
    p.add_argument("--port", type=int, default=26600)
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--advertise", default="hostname")
    p.add_argument("--rendezvous", required=True, help="folder shared with the controller")
    args = p.parse_args(argv)
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    local = int(os.environ.get("SLURM_LOCALID", "0"))
    host = _advertised(args.advertise)
    port = args.port + local if args.port else _free_port(args.bind)
    entry = {"addr": f"tcp://{host}:{port}", "host": host, "pid": os.getpid(), "rank": rank,
             "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "node": socket.gethostname()}
    os.makedirs(args.rendezvous, exist_ok=True)
    path = os.path.join(args.rendezvous, f"{rank}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(entry, f)
    os.replace(tmp, path)
    from .._cli.main import main as cli_main

    return cli_main(["worker", "--listen", f"tcp://{args.bind}:{port}", "--advertise", host])


if __name__ == "__main__":
    sys.exit(main())
