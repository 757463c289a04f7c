"""A short tour of regency: run it with `make demo`.

One script (the controller) starts a 2 x 2 mesh of processes on this machine, puts one
actor in each, and drives them: call, slice, stream, broadcast, errors, stop.

The actor class is defined right here, in __main__; regency pickles it by value to the
procs, so nothing has to be installed on the other side.
"""

from __future__ import annotations

import os
import time

from regency.actor import Actor, ActorError, context, current_rank, endpoint, this_host


class Trainer(Actor):
    """A stand-in for one rank of a training job."""

    def __init__(self, lr: float) -> None:
        self.lr = lr
        self.steps = 0

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def whoami(self) -> str:
        # current_rank(): this actor's position within the mesh or slice the message was
        # sent to. actor_instance.rank: its position in the mesh it was spawned on.
        mine = dict(context().actor_instance.rank)
        return f"current_rank {dict(current_rank())}, actor rank {mine}"

    @endpoint
    def train(self, steps: int) -> str:
        rank = current_rank().rank  # flat, row-major index within the message's mesh
        time.sleep(0.05 * (3 - rank))  # rank 3 finishes first: stream() shows arrival order
        self.steps += steps
        loss = 1.0 / (1 + self.steps * self.lr) + 0.01 * rank
        return f"rank {rank}: loss {loss:.3f} after {self.steps} steps"

    @endpoint
    def set_lr(self, lr: float) -> None:
        self.lr = lr
        print(f"lr is now {lr}")  # forwarded to the controller with a [mesh coords] prefix

    @endpoint
    def get_lr(self) -> float:
        return self.lr

    @endpoint
    def divide(self, x: float) -> float:
        return 1.0 / x


def section(title: str) -> None:
    print(f"\n== {title} ==", flush=True)


def main() -> None:
    section("spawn a 2 x 2 proc mesh and one Trainer per proc")
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2}, name="workers")
    trainers = procs.spawn("trainers", Trainer, lr=0.1)
    print(procs)
    print(trainers)

    section("call: one reply per rank, as a ValueMesh")
    pids = trainers.pid.call().get()
    print(pids)
    print("pid at hosts=1, gpus=0:", pids[{"hosts": 1, "gpus": 0}])
    print("pid at flat rank 3:    ", pids[3])

    section("slice, then call_one on a single actor")
    one = trainers.slice(hosts=1, gpus=0)
    print("hosts=1, gpus=0 ->", one.whoami.call_one().get())
    column = trainers.slice(gpus=1)  # keeps the `hosts` dimension
    print("gpus=1 ->", column.whoami.call().get())

    section("stream: replies in the order they arrive")
    for future in trainers.train.stream(10):
        print(future.get())

    section("broadcast: fire and forget")
    trainers.set_lr.broadcast(0.01)
    # Messages from one sender to one actor are handled in send order, so this call is
    # answered after every actor has handled the broadcast.
    print("lr on every rank:", list(trainers.get_lr.call().get().values()))
    time.sleep(0.2)  # let the forwarded output of the broadcast reach this terminal

    section("an endpoint raises: the caller gets ActorError, the actor lives on")
    try:
        trainers.slice(hosts=0, gpus=1).divide.call_one(0).get()
    except ActorError as err:
        print("caught:", repr(err.exception))
        print(err)
    print("still alive:", trainers.slice(hosts=0, gpus=1).divide.call_one(4).get())

    section("stop")
    trainers.stop().get()
    procs.stop().get()
    print("stopped; bye")


if __name__ == "__main__":
    main()
