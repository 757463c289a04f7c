"""Actors for the elastic-mesh tests (importable by procs)."""

from __future__ import annotations

import os
import threading

from regency.actor import Actor, current_rank, endpoint


class Trainer(Actor):
    """A training rank: its weights are a counter, bumped by each step."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.weights = 0
        self.steps = 0
        self.incarnation = os.getpid()
        self.stuck = threading.Event()

    @endpoint
    def step(self, lr: int) -> dict[str, int]:
        self.weights += lr
        self.steps += 1
        return {"rank": current_rank().rank, "pid": os.getpid(), "weights": self.weights,
                "seed": self.seed}

    @endpoint
    def state(self) -> int:
        return self.weights

    @endpoint
    def load(self, weights: int) -> None:
        self.weights = weights

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def hang(self) -> None:
        self.stuck.wait(60)


class Owner(Actor):
    """Owns a proc mesh of trainers; its ``__supervise__`` decides to respawn a dead rank."""

    def __init__(self) -> None:
        from regency.actor import this_host

        self.procs = this_host().spawn_procs(per_host={"gpus": 2}, name="owned")
        self.trainers = self.procs.spawn("trainers", Trainer, 5)
        self.respawned: list[int] = []

    def __supervise__(self, failure: object) -> bool:
        self.respawned += self.procs.respawn()
        return True  # handled: the owner carries on

    @endpoint
    def pids(self) -> list[int]:
        return [v for _, v in self.trainers.pid.call().get(timeout=30).items()]

    @endpoint
    def log(self) -> list[int]:
        return list(self.respawned)
