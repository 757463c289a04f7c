"""``Endpoint``: the messaging adverbs on a mesh's endpoint, and ``send``/``Accumulator``.

Every adverb binds its arguments against the endpoint's signature first (a ``TypeError``
names the endpoint), pickles them once in the calling thread, and hands one frame to the loop,
which writes it to every member of the (sliced) mesh. Replies come back to a port of the
caller; the returned ``Future`` is bound to the health of the members still pending.
"""

from __future__ import annotations

import inspect
import pickle
import random
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._mesh import Shape
from .._runtime import _messages as m
from .._runtime._completion import Completion
from .._runtime._pickling import describe_unpicklable, dumps
from ._bootstrap import runtime
from ._context import _current
from ._future import Future
from ._replies import decode, to_exception
from ._value_mesh import ValueMesh

if TYPE_CHECKING:
    from ._meshes import ActorMesh

__all__ = ["Accumulator", "Endpoint", "send"]

R = TypeVar("R")
A = TypeVar("A")


class Endpoint(Generic[R]):
    """An endpoint of an actor mesh (or of a slice of it), carrying the adverbs."""

    def __init__(self, mesh: ActorMesh, name: str, signature: inspect.Signature | None,
                 explicit_port: bool = False) -> None:
        self._mesh = mesh
        self._name = name
        self._signature = signature
        self._explicit_port = explicit_port

    # -- adverbs ---------------------------------------------------------------------------
    def call(self, *args: Any, **kwargs: Any) -> Future[ValueMesh[R]]:
        """Send to every member; a Future of the ValueMesh of their replies."""
        shape = self._mesh._shape
        collector = _Gather(shape, self._label)
        self._send(args, kwargs, collector.open(shape, self._mesh), shape)
        return Future._from(collector.completion, self._guard(shape))

    def call_one(self, *args: Any, **kwargs: Any) -> Future[R]:
        """Call a mesh of exactly one member; a Future of its reply."""
        shape = self._mesh._shape
        if len(shape) != 1:
            raise ValueError(
                f"call_one requires exactly 1 actor, but mesh {self._mesh._name_text} has "
                f"{len(shape)} ({shape.extent}); slice it first, e.g. mesh.slice(...)"
            )
        return self._one(shape, args, kwargs)

    def choose(self, *args: Any, **kwargs: Any) -> Future[R]:
        """Send to one member picked at random; a Future of its reply."""
        shape = self._mesh._shape
        if len(shape) == 0:
            raise ValueError(f"choose on an empty mesh {self._mesh._name_text}")
        pick = random.randrange(len(shape))
        return self._one(_single(shape, pick), args, kwargs)

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Future[R]]:
        """Send to every member; yields one Future per member, in arrival order."""
        shape = self._mesh._shape
        collector = _Stream(len(shape), self._label)
        self._send(args, kwargs, collector.open(shape, self._mesh), shape)
        guard = self._guard(shape)
        return iter([Future._from(c, guard) for c in collector.slots])

    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        """Fire and forget to every member. An exception in the endpoint fails the actor."""
        self._send(args, kwargs, None, self._mesh._shape)

    def rref(self, *args: Any, **kwargs: Any) -> Any:
        """Tensor-engine only; not available without an active device mesh."""
        raise TypeError(f"{self._label}: remote functions require an active device mesh")

    # -- internals -------------------------------------------------------------------------
    @property
    def _label(self) -> str:
        return f"{self._mesh._name_text}.{self._name}()"

    def _one(self, shape: Shape, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Future[R]:
        collector = _One(shape, self._label)
        self._send(args, kwargs, collector.open(shape, self._mesh), shape)
        return Future._from(collector.completion, self._guard(shape))

    def _send(self, args: tuple[Any, ...], kwargs: dict[str, Any],
              port: tuple[str, int] | None, shape: Shape) -> None:
        self._bind(args, kwargs)
        try:
            data, buffers = dumps((args, kwargs))
        except Exception as exc:
            if port is not None:
                runtime().close_port(port[1])
            raise TypeError(
                f"cannot send {self._label}: {describe_unpicklable(args, kwargs)}"
            ) from exc
        mesh = self._mesh
        s = shape.slice
        env = pickle.dumps((m.CALL, mesh._uid, self._name, port,
                            (shape.labels, s.offset, s.sizes, s.strides), _sender()), 5)
        frame = [env, data, *buffers]
        addrs = mesh._proc_addrs
        rt = runtime()
        dead = mesh._dead_reason(shape)
        if dead is not None:
            if port is not None:
                rt.close_port(port[1])
            from ..errors import SupervisionError

            raise SupervisionError(f"cannot call {self._label}: {dead}", endpoint=self._name)
        rt.call_soon(_fan_out, rt, [addrs[g] for g in shape.ranks()], frame)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._signature is None:
            return
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self._label}: {exc}") from None

    def _guard(self, shape: Shape) -> Callable[[], str | None]:
        uid = self._mesh._uid
        ranks = shape.ranks
        label = self._label

        def guard() -> str | None:
            rt = runtime()
            if rt.on_loop():
                return (f"blocking .get() on {label} inside an async actor would block its event "
                        "loop forever; use `await` instead")
            ctx = _current.get(None)
            if ctx is not None and ctx.actor_instance.mesh_uid == uid:
                me = ctx.actor_instance.rank
                rank = getattr(ctx, "global_rank", me.rank)
                if rank in ranks():
                    return (f"{label} calls the actor's own endpoint and blocks on the result: it "
                            "would deadlock, since an actor handles one message at a time")
            return None

        return guard


def _sender() -> str:
    ctx = _current.get(None)
    return ctx.actor_instance.actor_id if ctx is not None else "root"


def _fan_out(rt: Any, addrs: list[str], frame: list[Any]) -> None:
    send = rt._send
    for addr in addrs:
        send(addr, frame)


def _single(shape: Shape, local: int) -> Shape:
    """The 1-member sub-shape at a local rank, keeping the dimensions (size 1 each)."""
    coords = shape.slice.coordinates(local)
    return shape.select(**{lab: slice(c, c + 1) for lab, c in zip(shape.labels, coords)})


class _Collector:
    """A reply port on the caller, failing when a member it waits on dies."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.port_id = 0
        self.expected: set[int] = set()

    def open(self, shape: Shape, mesh: ActorMesh) -> tuple[str, int]:
        rt = runtime()
        self.expected = set(shape.ranks())
        targets = frozenset(mesh._proc_addrs[g] for g in self.expected)
        self.port_id = rt.open_port(self._on_reply, targets)
        rt.extra.setdefault("collectors", {})[self.port_id] = self
        return (rt.address, self.port_id)

    def _on_reply(self, env: tuple[Any, ...], frame: list[memoryview]) -> None:
        _, _, rank, status = env
        try:
            value = decode(frame)
        except Exception as exc:  # noqa: BLE001 - an unloadable reply is the caller's error
            self.fail(RuntimeError(f"{self.label}: could not unpickle the reply: {exc!r}"))
            return
        if rank is not None:
            self.expected.discard(rank)
        if status == m.OK:
            self.value(rank, value)
        else:
            self.fail(to_exception(status, value))

    def pending_text(self) -> str:
        return f"{self.label} on ranks {sorted(self.expected)}"

    def close(self) -> None:
        rt = runtime()
        rt.close_port(self.port_id)
        rt.extra.get("collectors", {}).pop(self.port_id, None)

    def value(self, rank: int | None, value: Any) -> None:
        raise NotImplementedError

    def fail(self, exc: BaseException) -> None:
        raise NotImplementedError

    def lost(self, exc: BaseException) -> None:
        """A member it waits on is gone: fail whatever is still pending."""
        self.fail(exc)


class _Gather(_Collector):
    def __init__(self, shape: Shape, label: str) -> None:
        super().__init__(label)
        self.shape = shape
        self.values: dict[int, Any] = {}
        self.completion = Completion(self.pending_text)

    def value(self, rank: int | None, value: Any) -> None:
        assert rank is not None
        self.values[rank] = value
        if len(self.values) == len(self.shape):
            self.close()
            shape = self.shape
            dense = Shape.from_sizes(shape.labels, shape.extent.sizes)
            self.completion.set_result(ValueMesh(dense, [self.values[g] for g in shape.ranks()]))

    def fail(self, exc: BaseException) -> None:
        self.close()
        self.completion.set_exception(exc)


class _One(_Gather):
    def value(self, rank: int | None, value: Any) -> None:
        self.close()
        self.completion.set_result(value)


class _Stream(_Collector):
    def __init__(self, n: int, label: str) -> None:
        super().__init__(label)
        self.slots = [Completion(self.pending_text) for _ in range(n)]
        self.next = 0

    def _take(self) -> Completion | None:
        if self.next >= len(self.slots):
            return None
        slot = self.slots[self.next]
        self.next += 1
        if self.next == len(self.slots):
            self.close()
        return slot

    def value(self, rank: int | None, value: Any) -> None:
        slot = self._take()
        if slot is not None:
            slot.set_result(value)

    def fail(self, exc: BaseException) -> None:
        slot = self._take()
        if slot is not None:
            slot.set_exception(exc)

    def lost(self, exc: BaseException) -> None:
        while (slot := self._take()) is not None:
            slot.set_exception(exc)


def send(endpoint: Endpoint[Any], args: tuple[Any, ...], kwargs: dict[str, Any],
         port: Any = None, selection: str = "all") -> None:
    """Low-level send: to all members (or one, ``selection="choose"``); replies go to ``port``."""
    if selection not in ("all", "choose"):
        raise ValueError(f"selection must be 'all' or 'choose', not {selection!r}")
    shape = endpoint._mesh._shape
    if selection == "choose":
        shape = _single(shape, random.randrange(len(shape)))
    target = (port._addr, port._port_id) if port is not None else None
    endpoint._send(tuple(args), dict(kwargs), target, shape)


class Accumulator(Generic[R, A]):
    """Broadcast a call, then fold the replies in arrival order: ``acc = combine(acc, r)``."""

    def __init__(self, endpoint: Endpoint[R], identity: A, combine: Callable[[A, R], A]) -> None:
        self._endpoint = endpoint
        self._identity = identity
        self._combine = combine

    def accumulate(self, *args: Any, **kwargs: Any) -> Future[A]:
        """A Future of the folded result."""
        futures = list(self._endpoint.stream(*args, **kwargs))
        result = Completion(f"accumulate over {self._endpoint._label}")
        state = {"acc": self._identity, "left": len(futures)}
        lock = threading.Lock()

        def fold(c: Completion) -> None:
            with lock:
                if result.done():
                    return
                exc = c.exception()
                if exc is not None:
                    result.set_exception(exc)
                    return
                state["acc"] = self._combine(state["acc"], c.outcome())
                state["left"] -= 1
                if state["left"] == 0:
                    result.set_result(state["acc"])

        if not futures:
            result.set_result(self._identity)
        for f in futures:
            f._completion.add_done_callback(fold)
        return Future._from(result)
