"""Actors for the stack-dump tests: one spins in a tight loop, the others wait in C."""

from __future__ import annotations

import os
import time

from regency.actor import Actor, current_rank, endpoint


class Stuck(Actor):
    """Rank 2 spins in pure Python; the others sleep (a C call); both until ``flag`` exists."""

    @endpoint
    def hang(self, flag: str) -> int:
        if current_rank().rank == 2:
            return spin_until(flag)
        while not os.path.exists(flag):
            time.sleep(0.05)
        return 0


def spin_until(flag: str) -> int:
    n = 0
    while True:
        n += 1
        if n % 1_000_000 == 0 and os.path.exists(flag):
            return n
