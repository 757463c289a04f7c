"""Actor classes used by the integration tests.

They live in an importable module (procs inherit the controller's ``sys.path``), so they are
pickled by reference, as a real program's library actors would be.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import logging
import os
import threading
import time
from typing import Any

from regency.actor import (
    Actor,
    Channel,
    Port,
    concurrent_endpoint,
    context,
    current_rank,
    current_size,
    endpoint,
    this_host,
    this_proc,
)


def describe_context() -> dict[str, Any]:
    """What the current context says, as plain picklable data."""
    ctx = context()
    inst = ctx.actor_instance
    return {
        "message_rank": dict(ctx.message_rank),
        "message_rank_rank": ctx.message_rank.rank,
        "current_rank": dict(current_rank()),
        "current_size": current_size(),
        "actor_rank": dict(inst.rank),
        "actor_rank_rank": inst.rank.rank,
        "name": inst.name,
        "class_name": inst.class_name,
        "actor_id": inst.actor_id,
        "proc_id": inst.proc_id,
        "creator": repr(inst.creator),
        "repr": repr(inst),
        "proc_mesh_sizes": inst.proc_mesh.sizes,
        "proc_sizes": inst.proc.sizes,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "thread": threading.current_thread().name,
    }


# -- basic sync and async actors -----------------------------------------------------------
class Counter(Actor):
    """A sync actor with a bit of state."""

    def __init__(self, start: int = 0) -> None:
        self.n = start

    @endpoint
    def incr(self, by: int = 1) -> int:
        self.n += by
        return self.n

    @endpoint
    def value(self) -> int:
        return self.n

    @endpoint
    def echo(self, x: Any) -> Any:
        return x

    @endpoint
    def fail(self, msg: str) -> None:
        raise ValueError(msg)

    @endpoint
    def fail_chained(self, msg: str) -> None:
        try:
            raise KeyError("inner cause")
        except KeyError as exc:
            raise RuntimeError(msg) from exc

    @endpoint
    def whoami(self) -> dict[str, Any]:
        return describe_context()

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def kw_only(self, a: int, *, b: int) -> int:
        return a * 10 + b

    @endpoint
    def stop_self(self) -> str:
        context().actor_instance.stop("done with it")
        return "stopping"

    @endpoint
    def call_mesh(self, mesh: Any) -> list[Any]:
        return list(mesh.value.call().get(timeout=20).values())

    def helper(self, x: int = 1) -> int:  # deliberately not an endpoint
        return 42 * x


class AsyncCounter(Actor):
    """An async actor with the same surface as Counter."""

    def __init__(self, start: int = 0) -> None:
        self.n = start
        self.loop_in_init = asyncio.get_running_loop() is not None

    @endpoint
    async def incr(self, by: int = 1) -> int:
        await asyncio.sleep(0)
        self.n += by
        return self.n

    @endpoint
    async def value(self) -> int:
        return self.n

    @endpoint
    async def echo(self, x: Any) -> Any:
        return x

    @endpoint
    async def fail(self, msg: str) -> None:
        await asyncio.sleep(0)
        raise ValueError(msg)

    @endpoint
    async def whoami(self) -> dict[str, Any]:
        return describe_context()

    @endpoint
    async def had_loop_in_init(self) -> bool:
        return self.loop_in_init


class Rebinding(Actor):
    """An endpoint the instance shadows with an attribute of its own, then un-shadows."""

    @endpoint
    def greet(self) -> str:
        return "class"

    @endpoint
    def rebind(self) -> None:
        self.greet = lambda: "instance"  # type: ignore[method-assign]

    @endpoint
    def unbind(self) -> None:
        del self.greet


class NoArgs(Actor):
    """An async actor (no endpoints at all is async per the spec)."""


class NeedsArgs(Actor):
    def __init__(self, a: int, b: str = "x") -> None:
        self.a = a
        self.b = b

    @endpoint
    def get(self) -> tuple[int, str]:
        return (self.a, self.b)


class InitOrder(Actor):
    """Records that __init__ ran before any endpoint (and how long init took)."""

    def __init__(self, gate_port: Port[str]) -> None:
        # Do some work in __init__ and report when it is done: a message sent right after
        # spawn must still see the finished object.
        self.items = [i * i for i in range(20000)]
        self.initialized = True
        gate_port.send("init-done")

    @endpoint
    def state(self) -> tuple[bool, int]:
        return (getattr(self, "initialized", False), len(getattr(self, "items", [])))


class SlowInit(Actor):
    """An async actor whose __init__ is slow-ish; its first message must see the result."""

    def __init__(self) -> None:
        total = 0
        for i in range(200000):
            total += i
        self.total = total

    @endpoint
    async def total_(self) -> int:
        return self.total


# -- explicit response ports ---------------------------------------------------------------
class ExplicitPort(Actor):
    def __init__(self) -> None:
        self.second_send_error: str | None = None

    @endpoint(explicit_response_port=True)
    def add(self, port: Port[int], a: int, b: int) -> str:
        port.send(a + b)
        return "ignored return value"

    @endpoint(explicit_response_port=True)
    def send_twice(self, port: Port[int]) -> None:
        port.send(1)
        try:
            port.send(2)
        except RuntimeError as exc:
            self.second_send_error = str(exc)

    @endpoint(explicit_response_port=True)
    def send_exception(self, port: Port[int]) -> None:
        port.exception(ValueError("via port"))

    @endpoint
    def last_error(self) -> str | None:
        return self.second_send_error

    @endpoint(explicit_response_port=True)
    def from_thread(self, port: Port[str], text: str) -> None:
        # Answer later, from another thread (the port is usable anywhere).
        threading.Thread(target=port.send, args=(text.upper(),)).start()


# -- concurrency ---------------------------------------------------------------------------
class Concurrent(Actor):
    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.log: list[str] = []

    @concurrent_endpoint
    async def wait_for_release(self, tag: str) -> str:
        self.log.append(f"start {tag}")
        await self.event.wait()
        self.log.append(f"end {tag}")
        return f"released {tag}"

    @endpoint
    async def release(self) -> str:
        self.log.append("release")
        self.event.set()
        return "ok"

    @endpoint
    async def get_log(self) -> list[str]:
        return list(self.log)


class OneAtATimeAsync(Actor):
    """Counts how many endpoint bodies run at once (must never exceed 1)."""

    def __init__(self) -> None:
        self.active = 0
        self.max_active = 0
        self.order: list[int] = []

    @endpoint
    async def work(self, i: int) -> int:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        for _ in range(3):
            await asyncio.sleep(0)  # chances for another message to sneak in
        await asyncio.sleep(0.001)
        self.order.append(i)
        self.active -= 1
        return i

    @endpoint
    async def stats(self) -> tuple[int, list[int]]:
        return (self.max_active, list(self.order))


class OneAtATimeSync(Actor):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.max_active = 0
        self.active = 0
        self.threads: set[str] = set()
        self.order: list[int] = []

    @endpoint
    def work(self, i: int) -> int:
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        self.threads.add(threading.current_thread().name)
        sum(range(20000))
        self.order.append(i)
        with self.lock:
            self.active -= 1
        return i

    @endpoint
    def stats(self) -> tuple[int, list[int], int, bool]:
        try:
            asyncio.get_running_loop()
            has_loop = True
        except RuntimeError:
            has_loop = False
        return (self.max_active, list(self.order), len(self.threads), has_loop)


# -- lifecycle -----------------------------------------------------------------------------
class Cleanup(Actor):
    """Reports its __cleanup__ on a port given at spawn."""

    def __init__(self, port: Port[Any]) -> None:
        self.port = port
        self.calls = 0

    @endpoint
    def ping(self) -> int:
        self.calls += 1
        return context().actor_instance.rank.rank

    def __cleanup__(self, exc: BaseException | None) -> None:
        self.port.send(("cleanup", context().actor_instance.rank.rank, repr(exc), self.calls))


class AsyncCleanup(Actor):
    def __init__(self, port: Port[Any]) -> None:
        self.port = port

    @endpoint
    async def ping(self) -> int:
        return context().actor_instance.rank.rank

    async def __cleanup__(self, exc: BaseException | None) -> None:
        await asyncio.sleep(0)
        self.port.send(("async-cleanup", context().actor_instance.rank.rank, repr(exc)))


class FileCleanup(Actor):
    def __init__(self, path: str) -> None:
        self.path = path

    @endpoint
    def ping(self) -> str:
        return "pong"

    def __cleanup__(self, exc: BaseException | None) -> None:
        rank = context().actor_instance.rank.rank
        with open(f"{self.path}.{rank}", "w") as f:
            f.write(f"cleanup {exc!r}")


# -- actors calling actors -----------------------------------------------------------------
class SyncCaller(Actor):
    @endpoint
    def call_value(self, mesh: Any) -> list[int]:
        return list(mesh.value.call().get(timeout=20).values())

    @endpoint
    def call_one_incr(self, mesh: Any) -> int:
        return mesh.slice(gpus=0).incr.call_one().get(timeout=20)

    @endpoint
    def pid(self) -> int:
        return os.getpid()


class AsyncCaller(Actor):
    @endpoint
    async def call_value(self, mesh: Any) -> list[int]:
        vm = await mesh.value.call()
        return list(vm.values())

    @endpoint
    async def gather(self, mesh: Any, n: int) -> list[int]:
        futs = [mesh.slice(gpus=0).incr.call_one().as_asyncio() for _ in range(n)]
        return list(await asyncio.gather(*futs))


class PassAround(Actor):
    """Receives meshes, ports and value meshes as arguments and returns them."""

    @endpoint
    def use_mesh(self, mesh: Any) -> list[Any]:
        return list(mesh.echo.call(context().actor_instance.rank.rank).get(timeout=20).values())

    @endpoint
    def return_mesh(self, mesh: Any) -> Any:
        return mesh

    @endpoint
    def to_port(self, port: Port[Any], values: list[Any]) -> int:
        for v in values:
            port.send(v)
        return len(values)

    @endpoint
    def sum_value_mesh(self, vm: Any) -> tuple[int, dict[str, int], list[Any]]:
        return (sum(vm.values()), vm.sizes, [dict(p) for p, _ in vm.items()])

    @endpoint
    def make_value_mesh(self, mesh: Any) -> Any:
        return mesh.value.call().get(timeout=20)

    @endpoint
    def spawn_on_proc_mesh(self, procs: Any) -> Any:
        return procs.spawn("spawned_by_actor", Counter, 100)

    @endpoint
    def open_channel_and_wait(self, mesh: Any) -> list[Any]:
        """Open a channel inside the actor, pass the port on, receive on it."""
        port, recv = Channel.open()
        mesh.to_port.call(port, ["a", "b"]).get(timeout=20)
        got = [recv.recv().get(timeout=20) for _ in range(2 * len(mesh))]
        return sorted(got)


class Spawner(Actor):
    """An actor that spawns procs and actors of its own."""

    def __init__(self) -> None:
        self.procs: Any = None

    @endpoint
    def spawn_children(self, n: int) -> tuple[Any, Any]:
        self.procs = this_host().spawn_procs(per_host={"kids": n}, name="kids")
        kids = self.procs.spawn("kid_counters", Counter, 1000)
        # use them from inside, too
        assert list(kids.incr.call().get(timeout=20).values()) == [1001] * n
        return self.procs, kids

    @endpoint
    def local_child(self) -> Any:
        return this_proc().spawn("local_child", Counter, 7)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def stop_children(self) -> None:
        if self.procs is not None:
            self.procs.stop().get(timeout=20)
            self.procs = None


# -- ordering ------------------------------------------------------------------------------
class Recorder(Actor):
    def __init__(self) -> None:
        self.seen: dict[str, list[int]] = {}

    @endpoint
    def record(self, sender: str, seq: int) -> int:
        self.seen.setdefault(sender, []).append(seq)
        return seq

    @endpoint
    def get_seen(self) -> dict[str, list[int]]:
        return self.seen


class AsyncRecorder(Actor):
    def __init__(self) -> None:
        self.seen: dict[str, list[int]] = {}

    @endpoint
    async def record(self, sender: str, seq: int) -> int:
        self.seen.setdefault(sender, []).append(seq)
        return seq

    @endpoint
    async def get_seen(self) -> dict[str, list[int]]:
        return self.seen


def ordering_plan(n_ranks: int, n_messages: int, seed: int) -> list[tuple[str, Any]]:
    """A deterministic mix of casts: ("broadcast"|"call", None), ("slice", (lo, hi)),
    ("one", rank). Shared by the controller-side and actor-side ordering tests."""
    import random

    rng = random.Random(seed)
    plan: list[tuple[str, Any]] = []
    for _ in range(n_messages):
        kind = rng.choice(["broadcast", "call", "slice", "one", "one"])
        if kind == "slice":
            lo = rng.randrange(n_ranks)
            hi = rng.randrange(lo + 1, n_ranks + 1)
            plan.append((kind, (lo, hi)))
        elif kind == "one":
            plan.append((kind, rng.randrange(n_ranks)))
        else:
            plan.append((kind, None))
    # a call to every rank last: once its replies are in, every rank has handled all of the
    # sender's messages, so a check from another sender (the controller) sees them all
    plan.append(("call", None))
    return plan


def run_ordering_plan(mesh: Any, sender: str, plan: list[tuple[str, Any]]) -> list[Any]:
    """Send the plan to ``mesh`` (dimension ``gpus``); returns the futures to wait on."""
    futures = []
    for seq, (kind, arg) in enumerate(plan):
        if kind == "broadcast":
            mesh.record.broadcast(sender, seq)
        elif kind == "call":
            futures.append(mesh.record.call(sender, seq))
        elif kind == "slice":
            lo, hi = arg
            futures.append(mesh.slice(gpus=slice(lo, hi)).record.call(sender, seq))
        else:
            futures.append(mesh.slice(gpus=arg).record.call_one(sender, seq))
    return futures


def expected_per_rank(n_ranks: int, plan: list[tuple[str, Any]]) -> dict[int, list[int]]:
    exp: dict[int, list[int]] = {r: [] for r in range(n_ranks)}
    for seq, (kind, arg) in enumerate(plan):
        if kind in ("broadcast", "call"):
            targets = range(n_ranks)
        elif kind == "slice":
            targets = range(*arg)
        else:
            targets = [arg]
        for r in targets:
            exp[r].append(seq)
    return exp


class OrderingDriver(Actor):
    """Runs the ordering plan from inside an actor (sync actor: blocking gets are fine)."""

    @endpoint
    def drive(self, mesh: Any, plan: list[tuple[str, Any]]) -> str:
        me = f"driver-{context().actor_instance.rank.rank}"
        for f in run_ordering_plan(mesh, me, plan):
            f.get(timeout=30)
        return me


class AsyncOrderingDriver(Actor):
    @endpoint
    async def drive(self, mesh: Any, plan: list[tuple[str, Any]]) -> str:
        me = f"async-driver-{context().actor_instance.rank.rank}"
        futures = run_ordering_plan(mesh, me, plan)
        for f in futures:
            await f
        return me


# -- errors --------------------------------------------------------------------------------
class Mixed(Actor):
    @endpoint
    def sync_one(self) -> int:
        return 1

    @endpoint
    async def async_one(self) -> int:
        return 2


class Colliding(Actor):
    @endpoint
    def slice(self) -> int:  # collides with ActorMesh.slice
        return 1


class CollidingStop(Actor):
    @endpoint
    async def stop(self) -> int:  # collides with ActorMesh.stop
        return 1


class Computes(Actor):
    """An abstract actor (``Actor`` is an ``ABC``): ``compute`` is left to subclasses."""

    @abc.abstractmethod
    def compute(self) -> int: ...

    @endpoint
    def run(self) -> int:
        return self.compute()


class Incomplete(Computes):
    pass


class Complete(Computes):
    def compute(self) -> int:
        return 42


class NotAnActor:
    pass


class Unpicklable(Actor):
    @endpoint
    def lock(self) -> Any:
        return threading.Lock()

    @endpoint
    def ok(self) -> int:
        return 1


# -- payloads ------------------------------------------------------------------------------
class Payload(Actor):
    @endpoint
    def echo(self, x: Any) -> Any:
        return x

    @endpoint
    def digest(self, x: Any) -> str:
        return hashlib.sha256(memoryview(x).cast("B")).hexdigest()

    @endpoint
    def relay(self, other: Any, x: Any) -> Any:
        """Send ``x`` on to another actor (proc to proc) and return what it echoed."""
        return other.echo.call_one(x).get(timeout=30)

    @endpoint
    def make_bytes(self, n: int) -> bytes:
        return bytes(range(256)) * (n // 256)


# -- controllers ---------------------------------------------------------------------------
class Registry(Actor):
    def __init__(self, tag: str = "first") -> None:
        self.tag = tag
        self.items: list[Any] = []

    @endpoint
    def add(self, x: Any) -> int:
        self.items.append(x)
        return len(self.items)

    @endpoint
    def info(self) -> tuple[str, list[Any], int]:
        return (self.tag, list(self.items), os.getpid())


# -- output --------------------------------------------------------------------------------
class Talker(Actor):
    @endpoint
    def say(self, text: str) -> None:
        print(f"stdout says {text}", flush=True)
        logging.getLogger("talker").warning("logging says %s", text)


class ControllerUser(Actor):
    @endpoint
    def use(self, name: str) -> tuple[int, int]:
        from regency.actor import get_or_spawn_controller

        reg = get_or_spawn_controller(name, Registry, "from-actor").get(timeout=20)
        n = reg.add.call_one(f"actor-{context().actor_instance.rank.rank}").get(timeout=20)
        return n, reg.info.call_one().get(timeout=20)[2]


class EnvProbe(Actor):
    @endpoint
    def probe(self, var: str) -> tuple[str | None, str]:
        return os.environ.get(var), os.getcwd()


class HeapProbe(Actor):
    @endpoint
    def frozen(self) -> int:
        """How many objects of this proc the garbage collector skips (``gc.freeze``)."""
        import gc

        return gc.get_freeze_count()


def boot_record_rank() -> None:
    """A spawn_procs bootstrap: runs in each new proc before any actor."""
    os.environ["REGENCY_TEST_BOOT"] = repr(sorted(dict(current_rank()).items()))


async def boot_async() -> None:
    await asyncio.sleep(0)
    os.environ["REGENCY_TEST_BOOT"] = "async"


def boot_raise() -> None:
    raise RuntimeError("bootstrap failed on purpose")


class BadInit(Actor):
    def __init__(self, fail_rank: int) -> None:
        if context().actor_instance.rank.rank == fail_rank:
            raise RuntimeError("init failed on purpose")

    @endpoint
    def ok(self) -> str:
        return "ok"


class Weights(Actor):
    """A parameter-server style actor that returns its state and updates it in place."""

    def __init__(self, n: int) -> None:
        import numpy as np

        self.w = np.zeros(n, dtype=np.int64)

    @endpoint
    def snapshot(self) -> Any:
        return self.w

    @endpoint
    def bump(self) -> int:
        self.w += 1
        return int(self.w[0])


class Noting(Actor):
    """Appends ``tag`` to a file when it cleans up (a file: the order is causal), after
    ``slow`` seconds."""

    def __init__(self, path: str, tag: str, slow: float = 0.0) -> None:
        self.path, self.tag, self.slow = path, tag, slow

    @endpoint
    def ok(self) -> int:
        return 1

    def __cleanup__(self, exc: BaseException | None) -> None:
        time.sleep(self.slow)
        with open(self.path, "a") as f:
            f.write(self.tag + "\n")


class NotingOwner(Noting):
    """Owns a mesh of ``Noting`` on procs of its own and one on its own proc."""

    @endpoint
    def setup(self) -> Any:
        from regency.actor import this_proc

        self.procs = this_host().spawn_procs(per_host={"k": 2}, name="notingkids")
        self.kids = self.procs.spawn("kids", Noting, self.path, "kid", 0.3)
        self.local = this_proc().spawn("local", Noting, self.path, "local")
        self.kids.ok.call().get(timeout=20)
        return self.kids, self.local


class HoldsItsCleanup(Actor):
    """Its ``__cleanup__`` waits (30 s at most) until the file ``release`` exists."""

    def __init__(self, release: str) -> None:
        self.release = release

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    def __cleanup__(self, exc: BaseException | None) -> None:
        limit = time.monotonic() + 30
        while not os.path.exists(self.release) and time.monotonic() < limit:
            time.sleep(0.01)
