"""The job of ``benchmarks/dashboard.py``: PROCS procs x ACTORS actor meshes, recording and
serving its dashboard, with a light steady load, until a line on stdin.

    python benchmarks/_dashboard_job.py OBSERVE_DIR PROCS ACTORS

Prints ``SPAWNED <seconds>`` once every actor is up, then ``READY``; meanwhile each actor
mesh is called (every rank, one sync call) about five times a second, each rank printing
a line now and then, so that the calls, throughput and logs panes have data.
"""

from __future__ import annotations

import sys
import threading
import time

from regency import config
from regency.actor import Actor, endpoint, this_host

folder, n_procs, n_actors = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
config.configure(observe=True, observe_dir=folder, dashboard=True)


class Worker(Actor):
    def __init__(self) -> None:
        self.n = 0

    @endpoint
    def step(self, i: int) -> int:
        self.n += 1
        if self.n % 10 == 1:
            print(f"step {i} done", flush=True)
        return i


t0 = time.monotonic()
procs = this_host().spawn_procs(per_host={"procs": n_procs}, name="trainers")
meshes = [procs.spawn(f"workers{k}", Worker) for k in range(n_actors)]
for mesh in meshes:
    mesh.initialized.get(timeout=600)
print(f"SPAWNED {time.monotonic() - t0:.1f}", flush=True)
stop = threading.Event()


def load() -> None:
    i = 0
    while not stop.is_set():
        for mesh in meshes:
            mesh.step.call(i).get(timeout=120)
        i += 1
        stop.wait(0.2)


loader = threading.Thread(target=load, daemon=True)
loader.start()
print("READY", flush=True)
sys.stdin.readline()
stop.set()
loader.join(timeout=120)
procs.stop().get(timeout=300)
print("DONE", flush=True)
