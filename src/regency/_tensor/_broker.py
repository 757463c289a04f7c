"""The per-proc meeting point of a tensor worker and an actor call that takes remote tensors.

An endpoint call with remote tensors among its arguments travels twice (ADR 0025): the call
goes to the actor with each tensor replaced by an :class:`Arg` and a :class:`Mark` among its
keyword arguments, and an ``ACTOR`` message goes into the mesh's op stream. When the worker
reaches that message, every op issued before the call has run; it puts the local values
here (:func:`put_args`). The actor, before running the endpoint, takes them (blocking its
thread, or awaiting on an async actor's loop). For ``.rref()`` the worker then waits for the
endpoint's value (:func:`take_result`) and stores its tensors under the result refs, so ops
issued after the call see them.

Importing this module installs the actor-side hooks into the actor runtime; unpickling a
``Mark`` imports it, so a proc pays nothing until a call brings tensors.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from .._api import _behavior
from .._api._endpoint import TENSOR_CALL
from ._messages import WorkerError

__all__ = ["Arg", "Mark", "TensorArgumentFailed", "put_args", "take_result"]

POLL_S = 0.5


class Arg:
    """Stands for the ``i``-th remote tensor of a call's arguments."""

    __slots__ = ("i",)

    def __init__(self, i: int) -> None:
        self.i = i

    def __reduce__(self) -> tuple[Any, ...]:
        return (Arg, (self.i,))


class Mark:
    """The keyword argument that makes a call wait for its tensors (``key``); ``rref``: the
    endpoint's value goes to the worker, not to the caller."""

    __slots__ = ("key", "name", "rref")

    def __init__(self, key: int, rref: bool, name: str) -> None:
        self.key = key
        self.rref = rref
        self.name = name

    def __reduce__(self) -> tuple[Any, ...]:
        return (Mark, (self.key, self.rref, self.name))


class TensorArgumentFailed(Exception):
    """A remote tensor passed to an endpoint holds the error of the op that made it; the
    caller turns it into that op's ``RemoteException``."""

    def __init__(self, seq: int, rank: int, fn: str, message: str) -> None:
        super().__init__(f"the remote op {fn} (seq {seq}) that made an argument failed on "
                         f"rank {rank}:\n{message}")
        self.error = WorkerError(seq, rank, fn, message)

    def __reduce__(self) -> tuple[Any, ...]:
        e = self.error
        return (TensorArgumentFailed, (e.seq, e.rank, e.fn, e.message))


class _Slot:
    """One call's exchange: the arguments (worker to actor), the value (actor to worker)."""

    __slots__ = ("args", "args_ready", "result", "result_ready", "waiters")

    def __init__(self) -> None:
        self.args: Any = None
        self.args_ready = threading.Event()
        self.result: tuple[str, Any] = ("error", "no value")
        self.result_ready = threading.Event()
        self.waiters: list[Callable[[], None]] = []


_lock = threading.Lock()
_slots: dict[int, _Slot] = {}


def _slot(key: int) -> _Slot:
    with _lock:
        s = _slots.get(key)
        if s is None:
            s = _slots[key] = _Slot()
        return s


def put_args(key: int, values: list[Any] | WorkerError) -> None:
    """Worker: the local values of call ``key``'s tensors (or the error one of them holds)."""
    s = _slot(key)
    with _lock:
        s.args = values
        s.args_ready.set()
        waiters, s.waiters = s.waiters, []
    for wake in waiters:
        wake()


def take_result(key: int, gone: Callable[[], str | None]) -> tuple[str, Any]:
    """Worker: wait for the endpoint's value of ``.rref()`` call ``key``: ``("ok", value)``
    or ``("error", text)``. ``gone()`` says why the call will never run (then it stops)."""
    s = _slot(key)
    while not s.result_ready.wait(POLL_S):
        why = gone()
        if why is not None:
            _forget(key)
            return ("error", why)
    _forget(key)
    return s.result


def _forget(key: int) -> None:
    with _lock:
        _slots.pop(key, None)


def _put_result(key: int, outcome: tuple[str, Any]) -> None:
    s = _slot(key)
    s.result = outcome
    s.result_ready.set()


def _args_of(mark: Mark, s: _Slot) -> list[Any]:
    values = s.args
    if not mark.rref or isinstance(values, WorkerError):
        _forget(mark.key)  # else the worker forgets it with the result
    if isinstance(values, WorkerError):
        raise TensorArgumentFailed(values.seq, values.rank, values.fn, values.message)
    return values


def _substitute(values: list[Any], args: Any, kwargs: Any) -> tuple[Any, Any]:
    from torch.utils._pytree import tree_map  # torch is here: the worker put tensors

    return tree_map(lambda x: values[x.i] if type(x) is Arg else x, (args, kwargs))


def _prepare(fn: Callable[..., Any], mark: Mark, slot: _Slot, args: Any, kwargs: Any,
             port: Any) -> tuple[Callable[..., Any], Any, Any]:
    try:
        local = _args_of(mark, slot)
    except TensorArgumentFailed as exc:
        if mark.rref:
            return _skip, (), {}  # the worker keeps the argument's error for the results
        if port is None:  # a broadcast: nobody to tell; the actor lives on
            print(f"regency: {mark.name} was not run: {exc}", file=sys.stderr)
            return _skip, (), {}
        raise
    args, kwargs = _substitute(local, args, kwargs)
    return (_to_worker(fn, mark) if mark.rref else fn), args, kwargs


def resolve(fn: Callable[..., Any], args: Any, kwargs: dict[str, Any],
            port: Any) -> tuple[Callable[..., Any], Any, Any]:
    """Actor (sync): wait for the call's tensors and put them in its arguments."""
    mark: Mark = kwargs.pop(TENSOR_CALL)
    s = _slot(mark.key)
    s.args_ready.wait()
    return _prepare(fn, mark, s, args, kwargs, port)


async def resolve_async(fn: Callable[..., Any], args: Any, kwargs: dict[str, Any],
                        port: Any) -> tuple[Callable[..., Any], Any, Any]:
    """Actor (async): as :func:`resolve`, awaiting on the loop instead of blocking it."""
    mark: Mark = kwargs.pop(TENSOR_CALL)
    s = _slot(mark.key)
    with _lock:
        ready = s.args_ready.is_set()
        if not ready:
            loop = asyncio.get_running_loop()
            arrived = loop.create_future()
            s.waiters.append(lambda: _wake(loop, arrived))
    if not ready:
        await arrived
    return _prepare(fn, mark, s, args, kwargs, port)


def _wake(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None]) -> None:
    loop.call_soon_threadsafe(_set, fut)


def _set(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _skip() -> None:
    return None


def _to_worker(fn: Callable[..., Any], mark: Mark) -> Callable[..., Any]:
    """``fn`` whose value (or error) goes to the waiting worker, never to the actor runtime:
    an ``.rref()`` call fails its results, not the actor."""
    key = mark.key

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(*args, **kwargs)
        except Exception:
            _put_result(key, ("error", traceback.format_exc()))
            return None
        if inspect.isawaitable(out):
            return _finish(out, key)
        _put_result(key, ("ok", out))
        return None

    return run


async def _finish(out: Any, key: int) -> None:
    try:
        value = await out
    except Exception:
        _put_result(key, ("error", traceback.format_exc()))
        return
    _put_result(key, ("ok", value))


_behavior.tensor_call_hooks = (resolve, resolve_async)
