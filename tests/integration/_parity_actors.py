"""Actors for the Monarch-parity tests (an importable module: pickled by reference)."""

from __future__ import annotations

import os
import sys
from typing import Any

from regency.actor import Actor, MeshFailure, context, current_rank, endpoint, this_host


class RankAtInit(Actor):
    """Records what ``current_rank()`` and ``context()`` say in ``__init__``."""

    def __init__(self) -> None:
        self.at_init = current_rank().rank
        inst = context().actor_instance
        self.who = (inst.name, repr(inst))

    @endpoint
    def seen(self) -> tuple[int, int, tuple[str, str]]:
        return self.at_init, current_rank().rank, self.who


class Faulty(Actor):
    """Fails in the ways whose wording users match on."""

    def __init__(self, bad: bool = False) -> None:
        if bad:
            raise ValueError("bad init")

    @endpoint
    def boom(self) -> None:
        raise ValueError("boom here")

    @endpoint
    def exit3(self) -> None:
        os._exit(3)

    @endpoint
    def abort(self, why: str | None) -> str:
        context().actor_instance.abort(why)
        return "answered first"

    @endpoint
    def ok(self) -> int:
        return 1

    @endpoint
    def info(self) -> tuple[str, str | None, int]:
        return sys.executable, os.environ.get("PARITY_X"), current_rank().rank


class Owner(Actor):
    """Spawns ``Faulty`` workers and keeps what ``__supervise__`` hears."""

    def __init__(self, mode: str = "handle") -> None:
        self.mode = mode
        self.seen: list[str] = []

    @endpoint
    def start(self) -> str:
        self.procs = this_host().spawn_procs(per_host={"w": 2})
        self.workers = self.procs.spawn("workers", Faulty)
        self.workers.ok.call().get(timeout=30)
        return "started"

    @endpoint
    def provoke(self, how: str) -> str:
        one = self.workers.slice(w=1)
        if how == "broadcast":
            one.boom.broadcast()  # no reply port
        elif how == "not-awaited":
            one.exit3.call()  # a future nobody waits on
        elif how == "kill":
            from regency.testing import kill_rank

            kill_rank(self.workers, 1)
        elif how == "abort":
            one.abort.broadcast("aborted on purpose")
        return "sent"

    @endpoint
    def events(self) -> list[str]:
        return list(self.seen)

    @endpoint
    def call_whole(self) -> str:
        try:
            self.workers.ok.call().get(timeout=30)
        except Exception as exc:  # the failure sticks to the mesh and its slices
            return f"{type(exc).__name__}: {exc}"
        return "answered"

    def __supervise__(self, failure: MeshFailure) -> Any:
        self.seen.append(f"{failure}\n{failure.report()}")
        if self.mode == "raise":
            raise KeyError("the supervisor's own error")
        if self.mode == "super":  # a mixin's way: let the base class decide (not handled)
            return super().__supervise__(failure)
        return True

    def __cleanup__(self, exc: BaseException | None) -> None:
        self.seen.append("cleanup")
        return super().__cleanup__(exc)  # type: ignore[no-any-return]


class AsyncOwner(Actor):
    """An async owner whose ``async def __supervise__`` raises."""

    def __init__(self) -> None:
        self.procs: Any = None

    @endpoint
    async def start(self) -> str:
        self.procs = this_host().spawn_procs(per_host={"w": 2})
        self.workers = self.procs.spawn("workers", Faulty)
        await self.workers.ok.call()
        return "started"

    @endpoint
    async def provoke(self) -> str:
        self.workers.slice(w=1).boom.broadcast()
        return "sent"

    @endpoint
    async def ok(self) -> int:
        return 1

    async def __supervise__(self, failure: MeshFailure) -> bool:
        raise KeyError("the async supervisor's own error")


class AsyncHookOnSyncActor(Actor):
    """A sync actor with an async ``__supervise__``: refused at spawn, as in Monarch."""

    @endpoint
    def f(self) -> int:
        return 1

    async def __supervise__(self, failure: MeshFailure) -> bool:
        return True
