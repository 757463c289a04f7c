"""The dispatch mode: every aten op under an active mesh becomes a message of its stream.

For each op: check the tensor arguments (remote, this mesh, this stream, not dropped), get
the output metadata (cached for ops that neither mutate nor alias, else by running the op on
FakeTensors), make a remote ``Tensor`` per new output, and append the op to the mesh.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import _active
from ._active import Stream
from ._borrow import share
from ._devices import Lifted
from ._errors import bad_arguments
from ._extras import OpaqueRef
from ._messages import Ref
from ._tensor import Meta, Tensor, make

__all__ = ["DataDependent", "fake_mode", "fake_only", "issue_python", "run_op"]

fake_mode = FakeTensorMode(allow_non_fake_inputs=False)


@contextlib.contextmanager
def fake_only() -> Iterator[None]:
    """Run torch on FakeTensors only: our mode (a user mode, above the infra fake mode)
    is set aside for the block."""
    with _disable_current_modes(), fake_mode:
        yield

#: ops that run on the controller itself (the profiler's record_function markers)
_LOCAL_NAMESPACES = frozenset({"profiler"})
_LIFT = {torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default}


class DataDependent(TypeError):
    """An op whose output shape or value depends on data (refused at the call site)."""


class _OpInfo:
    """What the engine needs to know about one aten overload (computed once)."""

    __slots__ = ("cacheable", "inplace", "mutated", "names", "spec", "view_of")

    def __init__(self, func: Any) -> None:
        schema = func._schema
        self.spec = f"op:{func.namespace}.{func._opname}.{func._overloadname}"
        self.names = [a.name for a in schema.arguments]
        self.mutated = [(i, a.name) for i, a in enumerate(schema.arguments)
                        if a.alias_info is not None and a.alias_info.is_write]
        aliased = any(r.alias_info is not None for r in schema.returns)
        self.cacheable = not self.mutated and not aliased and func not in _LIFT
        #: the argument a new output is a view of (its outputs share its borrow rights)
        self.view_of: int | None = None
        if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
            self.view_of = next((i for i, a in enumerate(schema.arguments)
                                 if a.alias_info is not None and not a.alias_info.is_write),
                                None)
        # writes some inputs and returns only them (add_, zero_, copy_, out= variants):
        # cached too, when the first run shows it leaves every input's layout as it was
        self.inplace = bool(self.mutated) and func not in _LIFT and all(
            r.alias_info is not None and r.alias_info.is_write for r in schema.returns)


_INPUT, _NEW, _PLAIN = 0, 1, 2  # kinds of output leaf
_infos: dict[Any, _OpInfo] = {}
_cache: dict[Any, tuple[Any, list[Any]]] = {}
CACHE_SIZE = 4096


def meta_of(t: torch.Tensor) -> Meta:
    """The metadata of a (fake) tensor."""
    return (tuple(t.shape), tuple(t.stride()), int(t.storage_offset()), t.dtype, t.device)


def fake_of(t: Tensor) -> Any:
    """The FakeTensor of a remote tensor (made from its metadata the first time)."""
    f = t._fake
    if f is None:
        shape, stride, offset, dtype, device = t._meta
        with fake_only():
            f = torch.empty_strided(shape, stride, dtype=dtype, device=device)
            if offset:
                f = f.as_strided(shape, stride, offset)
        t._fake = f
    return f


class _Args:
    """One walk over an op's arguments: refs for the message, fakes, a cache key, problems."""

    __slots__ = ("key", "mesh", "problems", "stream", "tensors")

    def __init__(self, mesh: Any, stream: Stream) -> None:
        self.mesh = mesh
        self.stream = stream
        self.key: list[Any] = []
        self.problems: list[tuple[Any, ...]] = []  # (path, rule[, detail]): named lazily
        self.tensors: list[Tensor] = []

    def convert(self, x: Any, where: tuple[Any, ...], local_ok: bool = False) -> Any:
        if isinstance(x, Tensor):
            if x._dropped is not None:
                self.problems.append((where, "DROPPED", f"dropped at (most recent call "
                                      f"last):\n{x._dropped}"))
            elif x._mesh is not self.mesh:
                self.problems.append((where, "WRONG_MESH"))
            elif x._stream is not self.stream:
                self.problems.append((where, "WRONG_STREAM"))
            elif x._access is not None and "r" not in x._access.mode:
                self.problems.append((where, "BORROWED", x._access.where()))
            self.key.append(x._meta)
            self.tensors.append(x)
            return Ref(x._ref)
        t = type(x)
        if t is OpaqueRef:  # its key is a remote tensor
            return OpaqueRef._create(self.convert(x._key, where, local_ok))
        if t is tuple or t is list:
            self.key.append(t)
            out = [self.convert(v, (*where, i), local_ok) for i, v in enumerate(x)]
            self.key.append(len(out))
            return out if t is list else tuple(out)
        if isinstance(x, torch.Tensor):
            if not local_ok:
                self.problems.append((where, "LOCAL_TENSOR"))
            self.key.append(None)
            return x
        self.key.append(t)  # 1, 1.0 and True hash alike but promote differently
        self.key.append(x)
        return x


def _fakes(x: Any) -> Any:
    if isinstance(x, Tensor):
        return fake_of(x)
    t = type(x)
    if t is tuple or t is list:
        return t(_fakes(v) for v in x)
    if t is dict:
        return {k: _fakes(v) for k, v in x.items()}
    return x


def _label(names: list[str], path: tuple[Any, ...]) -> str:
    """How an error names an argument: ``argument 'other' (args[1])``, ``argument 'out'``."""
    top, rest = path[0], "".join(f"[{i}]" for i in path[1:])
    if isinstance(top, str):
        return f"argument '{top}'{rest}"
    if top < len(names):
        return f"argument '{names[top]}' (args[{top}]){rest}"
    return f"args[{top}]{rest}"


def _refuse(where: str, names: list[str], walk: _Args) -> TypeError:
    return bad_arguments(where, [(_label(names, p[0]), *p[1:]) for p in walk.problems])


def _check_writes(walk: _Args, written: list[tuple[tuple[Any, ...], Any]]) -> None:
    """A tensor an op writes must be writable on its stream (not lent, not a read-only
    borrow): else ``MUTATING_BORROW``. ``written``: (path, argument) pairs."""
    for where, a in written:
        for i, t in enumerate(a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(t, Tensor) and t._access is not None and "w" not in t._access.mode:
                path = (*where, i) if isinstance(a, (list, tuple)) else where
                walk.problems.append((path, "MUTATING_BORROW", t._access.where()))


def run_op(mesh: Any, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Issue ``func(*args, **kwargs)`` on ``mesh``; the remote outputs."""
    info = _infos.get(func)
    if info is None:
        info = _infos[func] = _OpInfo(func)
    stream = _active.get_active_stream()
    walk = _Args(mesh, stream)
    lift = func in _LIFT
    margs = tuple([walk.convert(a, (i,), lift) for i, a in enumerate(args)])
    mkwargs = {k: walk.convert(v, (k,)) for k, v in kwargs.items()}
    if info.mutated:
        _check_writes(walk, [((i,), args[i]) if i < len(args) else ((n,), kwargs.get(n))
                             for i, n in info.mutated])
    if walk.problems:
        raise _refuse(str(func), info.names, walk)
    key = None
    if info.cacheable or info.inplace:
        try:
            key = (func, tuple(walk.key), tuple(kwargs))
            hit = _cache.get(key)
        except TypeError:  # an unhashable argument: no caching for this call
            key = hit = None
        if hit is not None:
            spec, metas = hit
            if not info.inplace:
                return _define(mesh, stream, info, func, margs, mkwargs, spec, metas, [])
            found = [(k, walk.tensors[v] if k == _INPUT else v, None) for k, v, _ in metas]
            return _define(mesh, stream, info, func, margs, mkwargs, spec, found,
                           _mutated(info, args))
    before = [meta_of(fake_of(t)) for t in walk.tensors] if key is not None \
        and info.inplace else None
    if lift:
        local = args[0]
        out = fake_mode.from_tensor(local)
        margs = (_shipped(local),)
    else:
        out = _propagate(func, args, kwargs)
    leaves, spec = tree_flatten(out)
    fakes_in = {id(fake_of(t)): t for t in walk.tensors}
    outs: list[tuple[int, Any, Any]] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            same = fakes_in.get(id(leaf))
            outs.append((_INPUT, same, None) if same is not None else (_NEW, meta_of(leaf), leaf))
        else:
            outs.append((_PLAIN, leaf, None))
    if key is not None and before is None and all(k != _INPUT for k, _, _ in outs):
        _remember(key, spec, [(k, v, None) for k, v, _ in outs])
    elif before is not None and all(k != _NEW for k, _, _ in outs) and before == [
            meta_of(fake_of(t)) for t in walk.tensors]:
        index = {id(t): i for i, t in enumerate(walk.tensors)}
        _remember(key, spec, [(k, index[id(v)] if k == _INPUT else v, None)
                              for k, v, _ in outs])
    mutates = _mutated(info, args)
    src = args[info.view_of] if info.view_of is not None and info.view_of < len(args) else None
    return _define(mesh, stream, info, func, margs, mkwargs, spec, outs, mutates,
                   src if isinstance(src, Tensor) else None)


def _shipped(local: torch.Tensor) -> Any:
    """A tensor made on the controller (``torch.tensor(data)``), as the workers get it: a
    copy; one on a device goes as a CPU copy that each worker moves to its own device."""
    if local.device.type == "cpu":
        return local.detach().clone()
    return Lifted(local.detach().cpu(), local.device)


_SCALAR_HINT = (" (From a torch.optim optimizer such as Adam? It reads its step count this "
                "way; pass fused=True, or capturable=True on CUDA, to keep it a tensor.)")


def _remember(key: Any, spec: Any, outs: list[tuple[int, Any, Any]]) -> None:
    if len(_cache) >= CACHE_SIZE:  # e.g. a loop over many distinct scalars
        _cache.clear()
    _cache[key] = (spec, outs)


def _propagate(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        with fake_only():
            return func(*_fakes(args), **_fakes(kwargs))
    except (DataDependentOutputException, DynamicOutputShapeException) as exc:
        hint = _SCALAR_HINT if func is torch.ops.aten._local_scalar_dense.default else ""
        raise DataDependent(
            f"{func} cannot run on a device mesh: its output's shape or value depends on the "
            f"data ({type(exc).__name__}), which the controller does not have. Fetch the "
            "value with fetch_shard()/inspect(), or do the work inside a remote() function "
            f"and inspect its result.{hint}") from None


def _mutated(info: _OpInfo, args: tuple[Any, ...]) -> list[int]:
    refs: list[int] = []
    for i, _ in info.mutated:
        if i < len(args):
            a = args[i]
            for t in (a if isinstance(a, (list, tuple)) else (a,)):
                if isinstance(t, Tensor):
                    refs.append(t._ref)
    return refs


def _define(mesh: Any, stream: Stream, info: _OpInfo, func: Any, margs: Any, mkwargs: Any,
            spec: Any, outs: list[tuple[int, Any, Any]], mutates: list[int],
            view_of: Tensor | None = None) -> Any:
    results: list[int | None] = []
    values: list[Any] = []
    for kind, value, fake in outs:
        if kind == _NEW:
            ref = mesh.new_ref()
            results.append(ref)
            out = make(mesh, stream, ref, value, fake)
            if view_of is not None:
                share(out, view_of)
            values.append(out)
        else:  # an input the op wrote into and returned, or a plain value
            results.append(None)
            values.append(value)
    fid = mesh.function_id(func, info.spec)
    mesh.issue(fid, margs, mkwargs, results, mutates)
    return tree_unflatten(values, spec)


def issue_python(mesh: Any, key: Any, spec: str | bytes, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any, mutates: list[Tensor] | None = None) -> Any:
    """Issue a Python function with known outputs: ``out`` is a pytree whose tensor leaves are
    (fake) tensors describing the outputs; returns the same tree of remote tensors."""
    stream = _active.get_active_stream()
    walk = _Args(mesh, stream)
    margs = tuple([walk.convert(a, (i,)) for i, a in enumerate(args)])
    mkwargs = {k: walk.convert(v, (k,)) for k, v in kwargs.items()}
    if mutates:
        _check_writes(walk, [(("mutates", i), t) for i, t in enumerate(mutates)])
    if walk.problems:
        raise _refuse(getattr(key, "__name__", str(key)), [], walk)
    leaves, tspec = tree_flatten(out)
    results: list[int | None] = []
    values: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            ref = mesh.new_ref()
            results.append(ref)
            fake = leaf if leaf.__class__.__name__ == "FakeTensor" else None
            values.append(make(mesh, stream, ref, meta_of(leaf), fake))
        else:
            results.append(None)
            values.append(leaf)
    fid = mesh.function_id(key, spec)
    mesh.issue(fid, margs, mkwargs, results, [t._ref for t in (mutates or [])])
    return tree_unflatten(values, tspec)


class _Mode(TorchDispatchMode):
    """Routes every aten op to the active mesh (or runs it locally under ``no_mesh``)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        mesh = _active.current()
        if mesh is None or func.namespace in _LOCAL_NAMESPACES:
            return func(*args, **(kwargs or {}))
        return run_op(mesh, func, args, kwargs or {})


def _route(self: _Mode, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
    mesh = _active.current()
    if mesh is None or func.namespace in _LOCAL_NAMESPACES:
        return func(*args, **(kwargs or {}))
    return run_op(mesh, func, args, kwargs or {})


# TorchDispatchMode wraps a subclass's __torch_dispatch__ to keep dynamo out, a cost per
# op; nothing here is ever compiled, so the plain function goes in after class creation.
_Mode.__torch_dispatch__ = _route  # type: ignore[method-assign,assignment,unused-ignore]
_mode = _Mode()


def _enter() -> None:
    _mode.__enter__()


def _leave() -> None:
    _mode.__exit__(None, None, None)


_active.mode_hooks.append((_enter, _leave))
