"""Elastic training: a rank killed with SIGKILL is respawned in place and the loop goes on.

    .venv/bin/python examples/elastic_training.py

Four trainers on ``{gpus: 4}`` take steps in lock step (their weights are a counter). At step
3 one of them is killed with ``kill -9``. The step in flight fails with ``SupervisionError``;
``procs.respawn(restore=...)`` starts a new proc at the same coordinates, rebuilds the
trainer there with its constructor arguments, and ``restore`` copies the weights of a live
peer into it. The loop then goes on, with the same mesh objects, over all four ranks.
(The failed step did run on the live ranks; the restored rank copies one of them, so every
rank is in step again and the step is simply taken once more.)
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import regency.actor as ra
from regency.actor import Actor, SupervisionError, current_rank, endpoint, this_host


class Trainer(Actor):
    """One data-parallel rank; ``weights`` stands for the model."""

    def __init__(self, lr: float) -> None:
        self.lr = lr
        self.weights = 0.0

    @endpoint
    def step(self) -> dict[str, Any]:
        self.weights += self.lr
        return {"rank": current_rank().rank, "pid": os.getpid(), "weights": self.weights}

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def get_weights(self) -> float:
        return self.weights

    @endpoint
    def set_weights(self, weights: float) -> None:
        self.weights = weights


def main(steps: int = 6, kill_at: int = 3, victim: int = 2) -> list[dict[str, Any]]:
    """Train ``steps`` steps, killing rank ``victim`` before step ``kill_at``; the log."""
    ra.unhandled_fault_hook = lambda failure: print(f"[hook] {failure.cause}", flush=True)
    procs = this_host().spawn_procs(per_host={"gpus": 4}, name="elastic")
    trainers = procs.spawn("trainers", Trainer, 0.5)

    def restore(point: dict[str, int], members: dict[str, Any]) -> None:
        weights = trainers.slice(gpus=0).get_weights.call_one().get()
        members["trainers"].set_weights.call_one(weights).get()
        print(f"restored {point} to weights {weights}", flush=True)

    log: list[dict[str, Any]] = []
    step, killed_at = 0, 0.0
    while step < steps:
        if step == kill_at and not log[-1].get("respawned"):
            os.kill(trainers.slice(gpus=victim).pid.call_one().get(), signal.SIGKILL)
            killed_at = time.monotonic()
        try:
            out = trainers.step.call().get(timeout=60)
        except SupervisionError as exc:
            print(f"step {step} failed: {str(exc).splitlines()[0]}", flush=True)
            ranks = procs.respawn(restore=restore)
            took = time.monotonic() - killed_at
            print(f"respawned rank(s) {ranks} {took:.2f}s after the kill", flush=True)
            log.append({"step": step, "respawned": ranks, "seconds": took})
            continue
        weights = sorted({v["weights"] for v in out.values()})
        print(f"step {step}: weights {weights} pids {[v['pid'] for v in out.values()]}",
              flush=True)
        log.append({"step": step, "weights": weights})
        step += 1
    procs.stop().get()
    return log


if __name__ == "__main__":
    main()
