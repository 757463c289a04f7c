"""A small recording job for the observation tests: run as a script by tests/system.

It records into ``observe_dir`` (first argument), spawns two meshes on two procs (a sync
and an async actor), calls them, prints, opens spans, adds metrics, lets one actor's
``__init__`` fail (the failure is dropped, so the job goes on), prints ``READY`` with the
job id, and waits for a line on stdin before stopping (so tests can read the store live).
"""

from __future__ import annotations

import sys

import regency.actor as ra
from regency import config
from regency.actor import Actor, endpoint, get_meter, span, this_host, traced

config.configure(observe=True, observe_dir=sys.argv[1],
                 dashboard=len(sys.argv) > 2 and sys.argv[2] == "dashboard")
ra.unhandled_fault_hook = lambda failure: None  # keep going: the failure is recorded
calls = get_meter().create_counter("test.calls")


class Worker(Actor):
    @endpoint
    def step(self, n: int, blob: bytes) -> int:
        with span("inner-work"):
            calls.add(1, {"kind": "step"})
        print(f"worker step {n}", flush=True)
        return n + len(blob)


class Helper(Actor):
    @endpoint
    async def work(self, n: int) -> int:
        return await self.traced_part(n)

    @traced(name="helper-part")
    async def traced_part(self, n: int) -> int:
        return n * 2


class Broken(Actor):
    def __init__(self) -> None:
        raise RuntimeError("broken on purpose")


procs = this_host().spawn_procs(per_host={"procs": 2}, name="trainers")
workers = procs.spawn("workers", Worker)
helpers = procs.spawn("helpers", Helper)
for i in range(20):
    workers.step.call(i, b"x" * 1000).get(timeout=30)
    helpers.work.call(i).get(timeout=30)
broken = procs.spawn("broken", Broken)
try:
    broken.initialized.get(timeout=30)
except Exception as exc:  # noqa: BLE001 - expected
    print(f"broken failed as meant: {type(exc).__name__}", flush=True)
from regency.actor import context  # noqa: E402

print(f"READY {context().actor_instance.proc_id}", flush=True)
sys.stdin.readline()
procs.stop().get(timeout=30)
print("DONE", flush=True)
