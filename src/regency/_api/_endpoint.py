"""``Endpoint``: the messaging adverbs on a mesh's endpoint, and ``send``/``Accumulator``.

Every adverb binds its arguments against the endpoint's signature first (a ``TypeError``
names the endpoint), pickles them once in the calling thread, and writes that one frame,
from the calling thread, to every member of the (sliced) mesh or to the first relays of its
tree. Replies come back to a port of the caller; the returned ``Future`` is bound to the
health of the members still pending. Whether a call may go at all is supervision's
judgement (``Runtime.verdicts``); the adverb only renders a refusal as ``SupervisionError``.
"""

from __future__ import annotations

import inspect
import math
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from .._mesh import Shape
from .._runtime import _current as _current_runtime
from .._runtime._borrow import ReplyReader, defer_interrupts
from .._runtime._completion import Completion
from .._runtime._pickling import describe_unpicklable, dumps_call
from .._runtime._runtime import Runtime
from .._supervision._reasons import call_failed
from .._transport._checkpoint import MAIN_ID
from .._wire import _messages as m
from .._wire import encode_call
from ..errors import SupervisionError
from . import _failfast, _future
from ._cancel import cancel_call
from ._context import _current
from ._deadlines import expire_late, expired_before_sent, not_sent, watch
from ._deadlines import scope as deadline_scope
from ._future import Future
from ._process import runtime
from ._replies import decode, to_exception
from ._route import Route
from ._value_mesh import ValueMesh
from ._value_stream import ValueStream
from ._waits import wait_watched, watch_await

if TYPE_CHECKING:  # annotations only: an endpoint belongs to a mesh, one layer up
    from ._actor_mesh import ActorMesh

__all__ = ["TENSOR_CALL", "Accumulator", "Endpoint", "send"]

#: The keyword argument that carries a call's remote tensors to the actor (ADR 0025).
TENSOR_CALL: Final = "__regency_tensor_call__"
#: Set by the tensor engine while a device mesh is active: ``hook(endpoint, adverb, args,
#: kwargs)`` sends a call whose arguments hold remote tensors, or returns ``NOT_TENSORS``.
tensor_calls: Any = None
NOT_TENSORS: Final[Any] = object()

_NO_DEADLINE: Final = math.inf  # ``deadline(None)``
_monotonic: Final = time.monotonic

R = TypeVar("R")
A = TypeVar("A")


class Endpoint(Generic[R]):
    """An endpoint of an actor mesh (or of a slice of it), carrying the adverbs."""

    _propagate: Any = None  # as_endpoint(..., propagate=...): output shapes for ``rref``

    def __init__(self, mesh: ActorMesh, name: str, signature: inspect.Signature | None) -> None:
        self._mesh = mesh
        self._name = name
        self._signature = signature
        self._positional = _positional_range(signature)
        self._label = f"{mesh._name_text}.{name}()"

    # -- adverbs ---------------------------------------------------------------------------
    def call(self, *args: Any, **kwargs: Any) -> Future[ValueMesh[R]]:
        """Send to every member; a Future of the ValueMesh of their replies."""
        if tensor_calls is not None:
            sent = tensor_calls(self, "call", args, kwargs)
            if sent is not NOT_TENSORS:
                return sent
        route = self._mesh._route
        rt = _rt()
        collector = _Gather(rt, route, self._label, self._mesh._uid, self._name)
        self._send(rt, args, kwargs, collector, route)
        return Future._of_call(collector.completion, collector)

    def call_one(self, *args: Any, **kwargs: Any) -> Future[R]:
        """Call a mesh of exactly one member; a Future of its reply."""
        if tensor_calls is not None:
            sent = tensor_calls(self, "call_one", args, kwargs)
            if sent is not NOT_TENSORS:
                return sent
        route = self._mesh._route
        if len(route.ranks) != 1:
            shape = route.shape
            raise ValueError(
                f"call_one requires exactly 1 actor, but mesh has {len(shape)} (mesh "
                f"{self._mesh._name_text}, {shape.extent}); slice it first, e.g. "
                "mesh.slice(...)"
            )
        return self._one(route, args, kwargs)

    def choose(self, *args: Any, **kwargs: Any) -> Future[R]:
        """Send to one member picked at random; a Future of its reply."""
        if tensor_calls is not None:
            sent = tensor_calls(self, "choose", args, kwargs)
            if sent is not NOT_TENSORS:
                return sent
        shape = self._mesh._shape
        if len(shape) == 0:
            raise ValueError(f"choose on an empty mesh {self._mesh._name_text}")
        return self._one(self._mesh._member_route(random.randrange(len(shape))), args, kwargs)

    def stream(self, *args: Any, **kwargs: Any) -> ValueStream[R]:
        """Send to every member; a :class:`ValueStream` of one Future per member, the k-th
        resolved by the k-th reply to arrive. Its ``cancel()`` cancels the members that
        have not answered."""
        if tensor_calls is not None:
            sent = tensor_calls(self, "stream", args, kwargs)
            if sent is not NOT_TENSORS:
                return sent
        route = self._mesh._route
        rt = _rt()
        collector = _Stream(rt, route, self._label, self._mesh._uid, self._name)
        self._send(rt, args, kwargs, collector, route)
        guard = _Guard(rt, self._mesh._uid, route, self._label)
        return ValueStream([Future._from(c, guard) for c in collector.slots], collector)

    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        """Fire and forget to every member. An exception in the endpoint fails the actor."""
        if tensor_calls is not None:
            sent = tensor_calls(self, "broadcast", args, kwargs)
            if sent is not NOT_TENSORS:
                return sent
        self._send(_rt(), args, kwargs, None, self._mesh._route)

    def rref(self, *args: Any, **kwargs: Any) -> Any:
        """Call every member in the op stream of the active device mesh; the result stays
        remote (tensors shaped by the endpoint's ``propagate``). Needs an active mesh."""
        if tensor_calls is None:
            raise TypeError(f"{self._label}: Remote functions require an active device mesh "
                            "(`with procs.activate():`)")
        return tensor_calls(self, "rref", args, kwargs)

    # -- internals -------------------------------------------------------------------------
    def _one(self, route: Route, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Future[R]:
        rt = _rt()
        collector = _One(rt, route, self._label, self._mesh._uid, self._name)
        self._send(rt, args, kwargs, collector, route)
        return Future._of_call(collector.completion, collector)

    def _send(self, rt: Runtime, args: tuple[Any, ...], kwargs: dict[str, Any],
              reply: _Collector | tuple[str, int] | None, route: Route) -> None:
        port = (reply.contact, reply.port_id) if isinstance(reply, _Collector) else reply
        try:
            self._bind(args, kwargs)
            try:
                data, buffers = dumps_call(args, kwargs, len(route.ranks))
            except Exception as exc:
                raise TypeError(
                    f"cannot send {self._label}: {describe_unpicklable(args, kwargs)}"
                ) from exc
            mesh = self._mesh
            verdicts = rt.verdicts  # supervision's published judgement; None: nothing refused
            if verdicts is not None:
                refusal = verdicts.call_refusal(mesh._uid, zip(route.ranks, route.addrs))
                if refusal is not None:
                    raise SupervisionError(  # Monarch's words: "Endpoint call w.f() failed"
                        call_failed(mesh._mesh_name, self._name, refusal), endpoint=self._name)
        except BaseException:
            if isinstance(reply, _Collector):
                reply.close()
            raise
        budget = 0.0
        expires = deadline_scope.get()  # ``_context.expiry_for``, inlined (the hot path)
        if not expires:
            ctx = _current.get(None)
            if ctx is not None:
                expires = ctx.expires
        if expires and expires != _NO_DEADLINE:
            budget = expires - _monotonic()
            if budget <= 0.0:  # too late to send: fail it here, as its timer would
                if isinstance(reply, _Collector):
                    reply.lost(expired_before_sent(self._label))  # every slot of a stream
                else:
                    not_sent(self._label)  # said on stderr: nobody waits on it
                return
            if isinstance(reply, _Collector):
                reply.timer_entry = watch(reply, expires, budget)
        post_call(rt, route, mesh._uid, self._name, port, [data, *buffers], budget)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._signature is None:
            return
        if not kwargs and self._positional is not None:
            low, high = self._positional
            if low <= len(args) <= high:
                return  # the common case, without inspect's slow bind
        if TENSOR_CALL in kwargs:  # the tensor engine's own argument, not the endpoint's
            kwargs = {k: v for k, v in kwargs.items() if k != TENSOR_CALL}
            if not kwargs and self._positional is not None:
                low, high = self._positional
                if low <= len(args) <= high:
                    return
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self._label}: {exc}") from None



class _Guard:
    """Why blocking on a call's result would never return, if it would not."""

    __slots__ = ("label", "route", "rt", "uid")

    def __init__(self, rt: Runtime, uid: str, route: Route, label: str) -> None:
        self.rt = rt
        self.uid = uid
        self.route = route
        self.label = label

    def __call__(self) -> str | None:
        return call_problem(self, False)

    def awaiting(self) -> str | None:
        """The problem with waiting (blocking or awaiting) on this call, if any."""
        return call_problem(self, True)


def call_problem(call: _Collector | _Guard, awaiting: bool) -> str | None:
    """Why waiting on ``call`` (its collector, or a guard) would never end, if it would not:
    blocking in an async actor's loop, or an actor waiting on a call to itself."""
    if not awaiting and threading.get_ident() == call.rt.loop_thread_id:
        return (f"blocking .get() on {call.label} inside an async actor would block its "
                "event loop forever; use `await` instead")
    ctx = _current.get(None)
    if ctx is not None and ctx.actor_instance.mesh_uid == call.uid and not getattr(
        ctx, "concurrent", False
    ):
        rank = getattr(ctx, "global_rank", ctx.actor_instance.rank.rank)
        if rank in call.route.ranks:
            return (f"{call.label} calls the actor's own endpoint and blocks on the result: "
                    "it would deadlock, since an actor handles one message at a time")
    return None


def wait_call(c: Completion, call: _Collector | _Guard, timeout: float | None) -> bool:
    """``Future.get``'s wait for a call's result, outside any running asyncio loop: refuse
    a wait that would never end (``call_problem``), then wait, telling fail-fast what the
    main thread is blocked on (see ``_failfast``). False on timeout."""
    problem = call_problem(call, False)
    if problem:
        raise RuntimeError(problem)
    if threading.get_ident() != MAIN_ID:  # an actor's handler (or a thread of the user's)
        return wait_watched(c, call, timeout)  # a wait that lasts is probed (``_waits``)
    return wait_blocking(c, timeout)


def wait_blocking(c: Completion, timeout: float | None) -> bool:
    """``c.wait(timeout)``, telling fail-fast what the main thread is blocked on.

    A fail-fast signal lets a blocked ``get()`` raise its call's failure itself, so that an
    uncaught one keeps its traceback (``_failfast``). Compiled code runs no signal handler,
    so the signal is often handled only back in ``Future.get``: ``waiting`` therefore stays
    set when the wait ends with a result, and ``Future.get`` clears it once it has that
    result or raised it.
    """
    if threading.get_ident() != MAIN_ID:
        return c.wait(timeout)
    _failfast.waiting = c
    done = False
    try:
        done = c.wait(timeout)
    finally:
        if not done:  # timed out, or interrupted: nothing of this call to raise
            _failfast.waiting = None
    return done


_future.call_problem = call_problem  # what a call's Future asks before it waits
_future.wait_call = wait_call  # and how it waits, compiled (ADR 0031)
_future.wait_blocking = wait_blocking
_future.watch_await = watch_await
_future.cancel_call = cancel_call  # Future.cancel() of a call (``_cancel``)


def _rt() -> Runtime:
    """The runtime (started on first use), without a call into an interpreted module when
    it runs already."""
    rt = _current_runtime.active
    return rt if rt is not None else runtime()


def _positional_range(sig: inspect.Signature | None) -> tuple[int, int] | None:
    """(min, max) positional argument counts when binding is that simple, else None."""
    if sig is None:
        return None
    low = high = 0
    for p in sig.parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            if p.kind is p.VAR_KEYWORD:
                continue
            if p.kind is p.VAR_POSITIONAL:
                return (low, 1 << 30)
            return None  # keyword-only parameters: let inspect check them
        high += 1
        if p.default is p.empty:
            low = high
    return (low, high)


def post_call(rt: Runtime, route: Route, uid: str, name: str, port: tuple[str, int] | None,
              payload: list[Any], budget: float = 0.0) -> None:
    """Write one ``CALL`` frame (``payload``: the pickle and its buffers) along ``route``:
    to its members, or to the first relays of its tree. Written by this thread, in order, so
    a later call cannot overtake it. ``budget``: its deadline, in seconds from now."""
    fanout = route.tree.fanout if route.tree is not None else 0
    header = encode_call(uid, name, port, route.cast, _sender(), fanout, budget)  # all hops
    frame = [header, *payload]
    lines = rt.lines
    for addr in route.current_hops(rt.dead_addrs) if rt.troubles else route.hops:
        # Flow control first: a full write queue makes the sender wait (ADR 0012).
        if not lines.send(addr, frame, True):  # no open connection: the router's way
            rt.router.make_room(addr)
            rt.post(addr, frame)


def _sender() -> str:
    ctx = _current.get(None)
    return ctx.actor_instance.actor_id if ctx is not None else "root"


class _Collector(ReplyReader):
    """A reply port on the caller, failing when a member it waits on dies.

    It is its port's handler, its completion's description and, when one address answers,
    its completion's reader: one object per call where there were four (the objects of
    calls in flight are what the garbage collector looks at, again and again)."""

    any_thread = False  # whether its handler may run on a thread that read the reply itself
    cancellable = False  # whether ``Future.cancel()`` may cancel it (``_cancel``)

    def __init__(self, rt: Runtime, route: Route, label: str, uid: str = "",
                 endpoint: str = "") -> None:
        self.route = route
        self.label = label
        self.uid = uid  # for the supervisor: which mesh and endpoint this call waits on
        self.endpoint = endpoint
        self.got: set[int] | None = None  # the ranks that replied (made by the first reply)
        self.timer_entry: list[Any] | None = None  # in the deadline timer's heap (``watch``)
        # where its replies go, as the call says it: probes and cancels name the call so
        # (``rt.contact`` may change later: ``attach_to_workers`` adds a TCP address)
        self.contact: str = rt.contact
        ports = self.ports = rt.port_table
        port_id = ports.open(self, route.targets, self.any_thread)
        one = route.tree is None and len(route.addrs) == 1  # one proc answers: read it here
        super().__init__(rt, port_id, route.addrs[0] if one else "", defer_interrupts)
        ports.collectors[port_id] = self

    @property
    def expected(self) -> set[int]:
        """The ranks whose replies are still pending."""
        got = self.got
        ranks = self.route.ranks
        return set(ranks) if got is None else {g for g in ranks if g not in got}

    def __call__(self, reply: m.Reply, frame: list[memoryview]) -> None:
        """The port's handler (``Runtime.open_port``): one reply, on whichever thread
        read it."""
        self._on_reply(reply, frame)

    def _on_reply(self, reply: m.Reply, frame: list[memoryview]) -> None:
        rank, status = reply.rank, reply.status
        try:
            value = decode(frame)
        except Exception as exc:
            self.fail(RuntimeError(f"{self.label}: could not unpickle the reply: {exc!r}"))
            return
        if rank is not None:
            got = self.got
            if got is None:
                self.got = {rank}
            else:
                got.add(rank)
        try:
            entry = self.timer_entry  # came after its deadline: the deadline decides
            if entry is not None and _monotonic() >= entry[0] and expire_late(self, entry):
                return
            if status == m.OK:
                self.value(rank, value)
            else:
                self.fail(to_exception(status, value))
        except Exception as exc:  # a fault of ours must fail the call, not leave it pending
            self.fail(RuntimeError(f"{self.label}: regency could not handle the reply: "
                                   f"{type(exc).__name__}: {exc}"))

    def pending_text(self) -> str:
        return f"{self.label} on ranks {sorted(self.expected)}"

    def pending(self) -> bool:
        """Whether it still waits for replies (its port is open)."""
        return self.ports.collectors.get(self.port_id) is self

    def close(self) -> None:
        ports = self.ports
        ports.close(self.port_id)
        ports.collectors.pop(self.port_id, None)
        entry = self.timer_entry
        if entry is not None:  # in the deadline timer's heap: it need not keep this call
            self.timer_entry = None
            entry[3] = None

    def value(self, rank: int | None, value: Any) -> None:
        raise NotImplementedError

    def fail(self, exc: BaseException) -> None:
        raise NotImplementedError

    def lost(self, exc: BaseException) -> None:
        """A member it waits on is gone: fail whatever is still pending."""
        self.fail(exc)


class _Gather(_Collector):
    any_thread = True  # its handler may run on a thread that read the reply itself
    cancellable = True

    def __init__(self, rt: Runtime, route: Route, label: str, uid: str = "",
                 endpoint: str = "") -> None:
        super().__init__(rt, route, label, uid, endpoint)
        self.values: dict[int, Any] = {}
        self.completion = Completion(self)
        if self.reply_from:
            self.completion.reader = self

    def value(self, rank: int | None, value: Any) -> None:
        assert rank is not None
        self.values[rank] = value
        if len(self.values) == len(self.route.ranks):
            self.close()
            shape = self.route.shape
            dense = Shape.from_sizes(shape.labels, shape.extent.sizes)
            values = [self.values[g] for g in self.route.ranks]
            self.completion.set_result(ValueMesh(dense, values))

    def fail(self, exc: BaseException) -> None:
        self.close()
        self.completion.set_exception(exc)

    def cancel(self, exc: BaseException) -> bool:
        """Fail with ``exc`` unless done already (``Future.cancel``); whether it did."""
        if not self.completion.set_exception(exc):
            return False
        self.close()
        return True


class _One(_Gather):
    def value(self, rank: int | None, value: Any) -> None:
        self.close()
        self.completion.set_result(value)


class _Stream(_Collector):
    """The replies of a ``stream()`` call: the k-th to arrive resolves the k-th slot."""

    cancellable = True  # as a whole, by ``ValueStream.cancel``

    def __init__(self, rt: Runtime, route: Route, label: str, uid: str = "",
                 endpoint: str = "") -> None:
        super().__init__(rt, route, label, uid, endpoint)
        self.slots = [Completion(self) for _ in route.ranks]
        self.next = 0
        self.taking = threading.Lock()  # replies on the loop thread, a cancel on the user's

    def _take(self) -> Completion | None:
        with self.taking:
            k = self.next
            if k >= len(self.slots):
                return None
            self.next = k + 1
        if k + 1 == len(self.slots):
            self.close()
        return self.slots[k]

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

    def cancel(self, exc: BaseException) -> bool:
        """Fail the slots not resolved with ``exc`` (``ValueStream.cancel``); whether any
        was."""
        cancelled = False
        while (slot := self._take()) is not None:
            cancelled = slot.set_exception(exc) or cancelled
        return cancelled


def send(endpoint: Endpoint[Any], args: tuple[Any, ...], kwargs: dict[str, Any],
         port: Any = None, selection: str = "all") -> None:
    """Low-level send: to all members (or one, ``selection="choose"``); replies go to ``port``."""
    if selection not in ("all", "choose"):
        raise ValueError(f"Invalid selection: {selection}: it must be 'all' or 'choose'")
    mesh = endpoint._mesh
    route = mesh._route
    if selection == "choose":
        route = mesh._member_route(random.randrange(len(mesh._shape)))
    target = (port._addr, port._port_id) if port is not None else None
    endpoint._send(runtime(), tuple(args), dict(kwargs), target, route)


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
        state: dict[str, Any] = {"acc": self._identity, "left": len(futures)}
        lock = threading.Lock()

        def fold(c: Completion) -> None:
            with lock:
                if result.done():
                    return
                exc = c.exception()
                if exc is not None:
                    result.set_exception(exc)
                    return
                try:
                    state["acc"] = self._combine(state["acc"], c.outcome())
                except Exception as reducer_error:  # the caller's get() raises it (Monarch)
                    result.set_exception(reducer_error)
                    return
                state["left"] -= 1
                if state["left"] == 0:
                    result.set_result(state["acc"])

        if not futures:
            result.set_result(self._identity)
        for f in futures:
            f._completion.add_done_callback(fold)
        return Future._from(result)
