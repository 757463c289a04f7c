"""Remote tensors as actor endpoint arguments, and ``endpoint.rref()`` (ADR 0025).

While a device mesh is active the endpoint adverbs offer their arguments here first. A call
that holds remote tensors goes out twice, in this order:

1. to the actor, through the ordinary adverb, each tensor replaced by a ``_broker.Arg`` and a
   ``_broker.Mark`` among the keyword arguments; the actor waits for the values before it
   runs the endpoint, so the actor's own message order is kept;
2. into the tensors' op stream as one ``ACTOR`` message, sent at once: when the worker of a
   rank reaches it, every op issued before the call has run there, and it hands the rank's
   local values to the actor on its proc.

``rref`` calls every member the same way, with the result tensors' refs in the ``ACTOR``
message: the worker waits for the endpoint's value and stores it, so the ops issued after the
call see it. The shapes come from the endpoint's ``propagate`` function, run on fake tensors;
without one (``None``/``"cached"``) the first call for given input shapes runs once, every
rank keeps its value, the controller reads the first rank's shapes (waiting for them) and
names the tensors with a ``BIND`` message; later calls with those shapes use the cache.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten

from .._api import _endpoint
from .._api._actor import endpoints_of
from .._api._future import Future
from .._api._value_stream import ValueStream
from .._runtime._completion import Completion
from ..errors import ActorError
from . import _active
from ._broker import Arg, Mark, TensorArgumentFailed
from ._dispatch import _Args, _check_writes, _fakes, _refuse, fake_only, meta_of
from ._errors import bad_arguments
from ._messages import ACTOR, BIND, KEEP, Ref
from ._tensor import Tensor, make
from ._worker import TensorMeta, TensorWorker

__all__ = ["install"]

_keys = itertools.count(1)
#: rref output trees (fake tensors) learnt by cached propagation, by endpoint and inputs
_cached: dict[Any, Any] = {}


def _hook(endpoint: Any, adverb: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``_endpoint.tensor_calls``: send a call that holds remote tensors, or say it holds none."""
    if adverb == "rref":
        return rref(endpoint, args, kwargs)
    if _endpoint.TENSOR_CALL in kwargs or endpoint._mesh._cls is TensorWorker:
        return _endpoint.NOT_TENSORS  # already converted, or the engine's own messages
    if not _holds_tensor(args, 0) and not _holds_tensor(kwargs, 0):
        return _endpoint.NOT_TENSORS
    leaves, spec = tree_flatten((args, kwargs))
    found = [i for i, x in enumerate(leaves) if isinstance(x, Tensor)]
    if not found:
        return _endpoint.NOT_TENSORS
    tensors: list[Tensor] = [leaves[i] for i in found]
    mesh = tensors[0]._mesh
    _check(endpoint, tensors, mesh, tensors[0]._stream)
    mine = endpoint._mesh
    route = mine._route
    if adverb == "choose":  # pick the member here: only its proc gets the values
        if len(mine._shape) == 0:
            raise ValueError(f"choose on an empty mesh {mine._name_text}")
        route = mine._member_route(random.randrange(len(mine._shape)))
    ranks = mesh.worker_ranks(route.addrs)
    key = next(_keys)
    for n, i in enumerate(found):
        leaves[i] = Arg(n)
    new_args, new_kwargs = tree_unflatten(leaves, spec)
    new_kwargs[_endpoint.TENSOR_CALL] = Mark(key, False, endpoint._label)
    if adverb == "choose":
        sent = endpoint._one(route, new_args, new_kwargs)
    else:
        sent = getattr(endpoint, adverb)(*new_args, **new_kwargs)
    mesh.issue_message(ACTOR, (key, [Ref(t._ref) for t in tensors], ranks, None, [],
                               mine._uid, endpoint._label))
    mesh.flush()
    if adverb == "broadcast":
        return None
    if adverb == "stream":
        # not cancellable, as the engine's calls are not: a cancelled call would leave its
        # arguments in each member's broker (the tensor worker puts them there regardless)
        return ValueStream([_translated(f, mesh) for f in sent])
    return _translated(sent, mesh)


def _holds_tensor(x: Any, depth: int) -> bool:
    """Whether a remote tensor is in ``x`` (tuples, lists, dicts; a quick look first, so a
    call without tensors pays no pytree walk)."""
    if isinstance(x, Tensor):
        return True
    if depth > 32:
        return False
    if isinstance(x, (tuple, list)):
        return any(_holds_tensor(v, depth + 1) for v in x)
    if isinstance(x, dict):
        return any(_holds_tensor(v, depth + 1) for v in x.values())
    return False


def _check(endpoint: Any, tensors: list[Tensor], mesh: Any, stream: Any) -> None:
    """The tensors of one call: one mesh, one stream, readable, not dropped."""
    problems: list[tuple[str, ...]] = []
    for n, t in enumerate(tensors):
        where = f"remote tensor {n} of the arguments"
        if t._dropped is not None:
            problems.append((where, "DROPPED", f"dropped at (most recent call last):\n"
                                               f"{t._dropped}"))
        elif t._mesh is not mesh:
            problems.append((where, "WRONG_MESH"))
        elif t._stream is not stream:
            problems.append((where, "WRONG_STREAM"))
        elif t._access is not None and "r" not in t._access.mode:
            problems.append((where, "BORROWED", t._access.where()))
    if problems:
        raise bad_arguments(endpoint._label, problems)


def _translated(fut: Future[Any], mesh: Any) -> Future[Any]:
    """``fut`` whose failure because an argument held an op's error is that op's
    ``RemoteException`` (with where the op was issued)."""
    done = Completion(f"an actor call with remote tensors on {mesh!r}")

    def settle(c: Completion) -> None:
        exc = c.exception()
        if exc is None:
            done.set_result(c.outcome())
            return
        inner = getattr(exc, "exception", None) if isinstance(exc, ActorError) else None
        if isinstance(inner, TensorArgumentFailed):
            exc = mesh.remote_exception(inner.error)
        done.set_exception(exc)

    fut._completion.add_done_callback(settle)
    return Future._from(done)


def rref(endpoint: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``endpoint.rref(*args, **kwargs)``: run it on every member in the active mesh's op
    stream; its tensors stay remote, shaped as the endpoint's ``propagate`` says."""
    mesh = _active.current()
    if mesh is None:
        raise TypeError(f"{endpoint._label}.rref(): Remote functions require an active "
                        "device mesh (`with procs.activate():`; not under no_mesh)")
    propagate = _propagate_of(endpoint)
    stream = _active.get_active_stream()
    walk = _Args(mesh, stream)
    margs = [walk.convert(a, (i,)) for i, a in enumerate(args)]
    mkwargs = {k: walk.convert(v, (k,)) for k, v in kwargs.items()}
    if walk.problems:
        raise _refuse(f"{endpoint._label}.rref", [], walk)
    written: list[Tensor]
    if propagate == "cached":
        cache_key = (endpoint._mesh._uid, endpoint._name,
                     tuple((t._meta, t.requires_grad) if isinstance(t, Tensor) else repr(t)
                           for t in tree_leaves((args, kwargs))))
        if cache_key not in _cached:
            return _rref_learning(endpoint, mesh, margs, mkwargs, cache_key)
        out, written = _cached[cache_key], []
    else:
        out, written = _shapes(propagate, args, kwargs, walk.tensors)
    if written:
        _check_writes(walk, [(("written",), t) for t in written])
        if walk.problems:
            raise _refuse(f"{endpoint._label}.rref", [], walk)
    ranks = _all_ranks(endpoint, mesh)
    leaves, spec = tree_flatten(out)
    results: list[int] = []
    values: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            ref = mesh.new_ref()
            results.append(ref)
            fake = leaf if type(leaf).__name__ == "FakeTensor" else None
            values.append(make(mesh, stream, ref, meta_of(leaf), fake))
        else:
            values.append(leaf)
    _send_rref(endpoint, mesh, margs, mkwargs, ranks, results, [t._ref for t in written])
    return tree_unflatten(values, spec)


def _send_rref(endpoint: Any, mesh: Any, margs: Any, mkwargs: Any, ranks: frozenset[int],
               results: Any, mutates: list[int]) -> int:
    """The actor call (its tensors as ``Arg``s), then its ``ACTOR`` message; the key."""
    key = next(_keys)
    arg_leaves, arg_spec = tree_flatten((margs, mkwargs))
    found = [i for i, x in enumerate(arg_leaves) if type(x) is Ref]
    refs = [arg_leaves[i] for i in found]
    for n, i in enumerate(found):
        arg_leaves[i] = Arg(n)
    new_args, new_kwargs = tree_unflatten(arg_leaves, arg_spec)
    new_kwargs[_endpoint.TENSOR_CALL] = Mark(key, True, endpoint._label)
    endpoint.broadcast(*new_args, **new_kwargs)
    mesh.issue_message(ACTOR, (key, refs, ranks, results, mutates, endpoint._mesh._uid,
                               endpoint._label))
    mesh.flush()
    return key


def _rref_learning(endpoint: Any, mesh: Any, margs: Any, mkwargs: Any, cache_key: Any) -> Any:
    """``rref`` with cached propagation, the first time for these input shapes: the call
    runs once, every rank keeps its value, the controller reads what the first rank's looks
    like (waiting for it, as ``remote()`` does) and then names its tensors (``BIND``)."""
    ranks = _all_ranks(endpoint, mesh)
    key = _send_rref(endpoint, mesh, margs, mkwargs, ranks, KEEP, [])
    try:
        metas = mesh.kept_meta(key, dict.fromkeys(mesh.labels, 0)).result()
    except BaseException:
        mesh.issue_message(BIND, (key, None))  # the other ranks forget their values
        raise
    with fake_only():
        out = tree_map(lambda m: torch.empty_strided(m[0], m[1], dtype=m[2])
                       if isinstance(m, TensorMeta) else m, metas,
                       is_leaf=lambda m: isinstance(m, TensorMeta))
    _cached[cache_key] = out
    stream = _active.get_active_stream()
    leaves, spec = tree_flatten(out)
    refs: list[int] = []
    values: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            ref = mesh.new_ref()
            refs.append(ref)
            values.append(make(mesh, stream, ref, meta_of(leaf), leaf))
        else:
            values.append(leaf)
    mesh.issue_message(BIND, (key, refs))
    return tree_unflatten(values, spec)


def _all_ranks(endpoint: Any, mesh: Any) -> frozenset[int]:
    ranks = mesh.worker_ranks(endpoint._mesh._route.addrs)
    if len(ranks) != len(mesh.workers._shape):
        raise ValueError(f"{endpoint._label}.rref(): the actors must cover every proc of "
                         f"{mesh!r}, since every rank keeps a result; call rref on the "
                         "whole actor mesh spawned on those procs")
    return ranks


def _propagate_of(endpoint: Any) -> Any:
    prop = endpoint._propagate
    if prop is None:
        ep = endpoints_of(endpoint._mesh._cls).get(endpoint._name)
        prop = ep.propagate if ep is not None else None
    if prop is None or prop == "cached":
        return "cached"
    if prop != "inspect" and not callable(prop):
        raise ValueError(f"{endpoint._label}: propagate must be a callable, None, 'cached' "
                         f"or 'inspect', not {prop!r} ('mocked' is not supported)")
    return prop


def _shapes(propagate: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
            tensors: list[Tensor]) -> tuple[Any, list[Tensor]]:
    """The propagate function's output on fake tensors, and the tensors it wrote to."""
    if propagate == "inspect":
        return None, []
    fargs, fkwargs = _fakes(args), _fakes(kwargs)
    fakes = [t._fake for t in tensors]
    before = [f._version for f in fakes]
    with fake_only():
        out = propagate(*fargs, **fkwargs)
    written = [t for t, f, v in zip(tensors, fakes, before) if f._version > v]
    return out, written


def _enter() -> None:
    _endpoint.tensor_calls = _hook


def _leave() -> None:
    """Once a mesh was active, calls keep being offered: a remote tensor made in the
    block may be passed after it, and goes to its own mesh (as Monarch's). A call then
    pays one look at its arguments (about a microsecond)."""


def install() -> None:
    """Offer endpoint calls to this module once any mesh was active."""
    if (_enter, _leave) not in _active.mode_hooks:
        _active.mode_hooks.append((_enter, _leave))
        if _active.any_active():
            _enter()
