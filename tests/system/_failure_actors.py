"""Actor classes for the in-process failure tests (``test_failures_*.py``).

They live in an importable module so that procs unpickle them by reference (procs inherit the
controller's ``sys.path``, which pytest extended with this directory).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import time
from pathlib import Path
from typing import Any

from regency.actor import Actor, MeshFailure, context, endpoint, this_host


class Abort(BaseException):
    """A BaseException that is not an Exception: escaping an endpoint, it fails the actor."""


class Victim(Actor):
    """A sync actor that can fail in every way a rank can fail."""

    def __init__(self, fail_init: bool = False, marker: str | None = None) -> None:
        if fail_init:
            raise ValueError("init failed on purpose")
        self.marker = marker

    @endpoint
    def ping(self, x: Any = None) -> Any:
        return x

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def sleep(self, seconds: float) -> str:
        time.sleep(seconds)
        return "slept"

    @endpoint
    def sleep_marked(self, seconds: float, path: str) -> str:
        """Write ``path`` (so a test knows the call is running), then sleep."""
        Path(path).write_text(str(os.getpid()))
        time.sleep(seconds)
        return "slept"

    @endpoint
    def boom(self, text: str = "boom", delay: float = 0.0) -> None:
        time.sleep(delay)
        raise ValueError(text)

    @endpoint
    def base_exception(self) -> None:
        raise Abort("a BaseException from an endpoint")

    @endpoint
    def system_exit(self, code: int = 4) -> None:
        raise SystemExit(code)

    @endpoint
    def os_exit(self, code: int = 3) -> None:
        os._exit(code)

    @endpoint
    def segfault(self) -> None:
        ctypes.string_at(0)

    @endpoint
    def chatter(self, n: int) -> None:
        for i in range(n):
            print(f"chatter line {i}", flush=True)

    @endpoint
    def call_mesh(self, mesh: Any) -> Any:
        """Call ``mesh`` and block on it: raises at once if ``mesh`` includes this actor."""
        return list(mesh.ping.call("me").get(timeout=5).values())

    def __cleanup__(self, exc: BaseException | None) -> None:
        if self.marker:
            rank = context().actor_instance.rank.rank
            Path(f"{self.marker}.{rank}").write_text(f"{type(exc).__name__}|{exc!r}")


class AsyncVictim(Actor):
    """An async actor with the same ways to fail (those that make sense on a loop)."""

    def __init__(self, marker: str | None = None) -> None:
        self.marker = marker
        self.release = asyncio.Event()

    @endpoint
    async def ping(self, x: Any = None) -> Any:
        return x

    @endpoint
    async def pid(self) -> int:
        return os.getpid()

    @endpoint
    async def sleep(self, seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "slept"

    @endpoint
    async def boom(self, text: str = "boom") -> None:
        raise ValueError(text)

    @endpoint
    async def blocking_get_on_loop(self, other: Any) -> Any:
        return other.ping.call_one("x").get(timeout=5)

    @endpoint
    async def await_myself(self, mesh: Any) -> Any:
        return await mesh.ping.call_one("me")

    def __cleanup__(self, exc: BaseException | None) -> None:
        if self.marker:
            rank = context().actor_instance.rank.rank
            Path(f"{self.marker}.{rank}").write_text(f"{type(exc).__name__}|{exc!r}")


class Manager(Actor):
    """Owns a mesh of workers on procs of its own; ``mode`` decides what ``__supervise__`` does.

    * ``"handle"``: return True (handled);
    * ``"ignore"``: return False (the manager fails too);
    * ``"raise"``: raise (the manager fails, with the chain);
    * ``"replace"``: spawn a replacement worker mesh on fresh procs and return True;
    * ``"none"``: like having no ``__supervise__`` at all.
    """

    def __init__(self, mode: str, n: int = 2) -> None:
        self.mode = mode
        self.n = n
        self.seen: list[dict[str, Any]] = []
        self.generation = 0
        self.replace_error: str | None = None
        self._spawn()

    def _spawn(self) -> None:
        self.generation += 1
        self.procs = this_host().spawn_procs(per_host={"w": self.n},
                                             name=f"wprocs{self.generation}")
        self.workers = self.procs.spawn(f"workers{self.generation}", Victim)

    @endpoint
    def worker_pids(self) -> list[int]:
        return list(self.workers.pid.call().get(timeout=20).values())

    @endpoint
    def fail_worker(self, rank: int) -> None:
        self.workers.slice(w=rank).boom.broadcast("worker failed on purpose")

    @endpoint
    def wait_on_worker(self, rank: int, seconds: float) -> Any:
        return self.workers.slice(w=rank).sleep.call_one(seconds).get(timeout=30)

    @endpoint
    def seen_failures(self) -> list[dict[str, Any]]:
        return list(self.seen)

    @endpoint
    def generation_(self) -> int:
        return self.generation

    @endpoint
    def ping_workers(self) -> list[Any]:
        return list(self.workers.ping.call("ok").get(timeout=20).values())

    @endpoint
    def replace_error_(self) -> str | None:
        return self.replace_error

    @endpoint
    def stop_workers(self) -> None:
        self.procs.stop().get(timeout=20)

    def __supervise__(self, failure: MeshFailure) -> bool:
        self.seen.append(failure_fields(failure))
        if self.mode == "raise":
            raise RuntimeError("__supervise__ raised on purpose")
        if self.mode == "replace":
            if failure.mesh_name.startswith(f"workers{self.generation}-"):
                try:
                    self.procs.stop()
                    self._spawn()
                except Exception as exc:  # noqa: BLE001 - reported through an endpoint
                    self.replace_error = repr(exc)
            return True
        if self.mode == "none":
            return False
        return self.mode == "handle"


class AsyncManager(Actor):
    """An async owner with an ``async def __supervise__``."""

    def __init__(self, handle: bool) -> None:
        self.handle = handle
        self.seen: list[dict[str, Any]] = []

    @endpoint
    async def start(self) -> list[int]:
        self.procs = this_host().spawn_procs(per_host={"w": 2}, name="awprocs")
        self.workers = self.procs.spawn("aworkers", AsyncVictim)
        return list((await self.workers.pid.call()).values())

    @endpoint
    async def fail_worker(self, rank: int) -> None:
        self.workers.slice(w=rank).boom.broadcast("async worker failed on purpose")

    @endpoint
    async def seen_failures(self) -> list[dict[str, Any]]:
        return list(self.seen)

    async def __supervise__(self, failure: MeshFailure) -> bool:
        await asyncio.sleep(0)
        self.seen.append(failure_fields(failure))
        return self.handle


class Parent(Actor):
    """Spawns child procs of its own and waits on them."""

    @endpoint
    def start(self, n: int = 2) -> list[int]:
        self.procs = this_host().spawn_procs(per_host={"kids": n}, name="kidprocs")
        self.kids = self.procs.spawn("kids", Victim)
        return list(self.kids.pid.call().get(timeout=20).values())

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def wait_on_kid(self, rank: int, seconds: float, path: str) -> Any:
        """Block on a call to one kid (which writes ``path`` once it runs)."""
        return self.kids.slice(kids=rank).sleep_marked.call_one(seconds, path).get(timeout=30)


def failure_fields(failure: MeshFailure) -> dict[str, Any]:
    """A MeshFailure as plain, picklable data (MeshFailure compares by identity)."""
    return {
        "mesh_name": failure.mesh_name,
        "ranks": list(failure.ranks),
        "coords": [dict(c) for c in failure.coords],
        "actor_class": failure.actor_class,
        "endpoint": failure.endpoint,
        "host": failure.host,
        "pid": failure.pid,
        "cause": failure.cause,
        "traceback": failure.traceback,
        "last_lines": list(failure.last_lines),
        "chain": list(failure.chain),
        "report": failure.report(),
    }
