"""Actors for ``test_failure_kinds`` (importable by procs)."""

from __future__ import annotations

import os
import time

from regency.actor import Actor, endpoint


class Doomed(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def raise_(self) -> None:
        raise ValueError("on purpose")

    @endpoint
    def exit_(self, code: int) -> None:
        os._exit(code)

    @endpoint
    def nap(self) -> None:
        time.sleep(300)
