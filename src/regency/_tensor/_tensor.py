"""``Tensor``: a remote tensor, one local tensor per rank of its mesh; no data here.

It is a torch wrapper subclass carrying a ref (the id of its value in every worker's table),
its device mesh, its stream and its metadata; the FakeTensor that shape propagation needs is
made on first use. Dropping it (``drop()`` or garbage collection) queues a batched delete.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from . import _active
from ._active import Stream
from ._errors import RULES, user_stack

__all__ = ["Meta", "Tensor", "make", "mesh_of_arguments"]

#: (shape, stride, storage_offset, dtype, device): what a value looks like
Meta = tuple[tuple[int, ...], tuple[int, ...], int, torch.dtype, torch.device]


class Tensor(torch.Tensor):
    """A tensor that lives on a device mesh: a collection of one local tensor per rank."""

    _ref: int
    _mesh: Any
    _stream: Stream
    _meta: Meta
    _fake: Any
    _dropped: str | None
    _access: Any  # the Access of its storage on its stream (views share one); None: plain

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment,unused-ignore]

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (),  # type: ignore[override,unused-ignore]
                           kwargs: Any = None) -> Any:
        """An op outside every ``activate()``: it runs on the mesh of its remote tensors,
        as Monarch's do (the ops wait in the mesh's stream for its next flush: a fetch,
        a full batch, the end of an ``activate()`` block)."""
        mesh = mesh_of_arguments(args, kwargs)
        if mesh is None or _active.any_active():
            raise TypeError(f"{func}: NO_MESH: {RULES['NO_MESH']}")
        with _active.Activation(mesh, flush=False):
            return func(*args, **(kwargs or {}))

    def drop(self) -> None:
        """Free this value on every rank now; using the tensor afterwards is a TypeError."""
        if self._dropped is None:
            self._dropped = user_stack()
            self._mesh.delete(self._ref)

    @property
    def dropped(self) -> bool:
        """Whether ``drop()`` was called."""
        return self._dropped is not None

    @property
    def mesh(self) -> Any:
        """The device mesh it lives on."""
        return self._mesh

    @property
    def stream(self) -> Stream:
        """The stream it belongs to."""
        return self._stream

    def reduce(self, dims: str | tuple[str, ...] = (), reduction: str = "sum",
               scatter: bool = False, mesh: Any = None, out: Any = None) -> Tensor:
        """Reduce over mesh dims; see :func:`regency.reduce`."""
        from ._collectives import reduce_tensor
        return reduce_tensor(self, dims, reduction, scatter, mesh, out, inplace=False)

    def reduce_(self, dims: str | tuple[str, ...] = (), reduction: str = "sum",
                scatter: bool = False, mesh: Any = None) -> Tensor:
        """Reduce over mesh dims in place; see :func:`regency.reduce_`."""
        from ._collectives import reduce_tensor
        return reduce_tensor(self, dims, reduction, scatter, mesh, None, inplace=True)

    def to_mesh(self, mesh: Any, stream: Stream | None = None) -> Tensor:
        """This tensor moved to another mesh; see :func:`regency.to_mesh`."""
        from ._transfer import to_mesh
        return to_mesh(self, mesh, stream)  # type: ignore[no-any-return,unused-ignore]

    def slice_mesh(self, **coords: int) -> Tensor:
        """This tensor on a slice of its mesh; see :func:`regency.slice_mesh`."""
        from ._transfer import slice_mesh
        return slice_mesh(self, **coords)  # type: ignore[no-any-return,unused-ignore]

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            f"{self!r} cannot be pickled: a remote tensor has no data here. Pass it to an "
            "endpoint of actors spawned on its mesh's procs (each actor then gets its "
            "rank's local tensor), or fetch it with fetch_shard()")

    def __del__(self) -> None:
        if getattr(self, "_dropped", "x") is None:
            try:
                self._mesh.delete(self._ref)
            except Exception:  # interpreter shutdown: the workers go with their procs
                pass

    def __repr__(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override,unused-ignore]
        shape = tuple(self._meta[0])
        return (f"regency.Tensor(shape={shape}, dtype={self._meta[3]}, mesh={self._mesh!r}, "
                f"stream={self._stream.name!r}{', dropped' if self._dropped else ''})")

    __str__ = __repr__

    def __getitem__(self, index: Any) -> Any:
        """``t[i]``, where an integer may be a 0-d integer remote tensor (``t[rank]``).

        torch turns such an index into a Python int, which needs the data; here it becomes
        ``index_select`` on that dim: the result is a copy, not a view.
        """
        items = index if type(index) is tuple else (index,)
        if not any(_is_rank_index(i) for i in items):
            return torch.Tensor.__getitem__(self, index)
        return _select(self, items)


def _is_rank_index(i: Any) -> bool:
    return (isinstance(i, Tensor) and i.dim() == 0
            and not i.dtype.is_floating_point and not i.dtype.is_complex
            and i.dtype is not torch.bool)


def _select(t: Tensor, items: tuple[Any, ...]) -> Any:
    """Index ``t`` one item at a time: ints, slices and 0-d integer remote tensors."""
    out: Any = t
    dim = 0
    for i in items:
        if _is_rank_index(i):
            out = out.index_select(dim, i.reshape(1)).squeeze(dim)
        elif isinstance(i, int) and not isinstance(i, bool):
            out = out.select(dim, i)
        elif isinstance(i, slice):
            out = torch.Tensor.__getitem__(out, (slice(None),) * dim + (i,))
            dim += 1
        else:
            raise TypeError(
                f"indexing with a remote integer tensor: index item {i!r} is not supported "
                "alongside it; use ints, slices and 0-d integer remote tensors only, or "
                "index_select()/gather() directly")
    return out


def _binary(name: str, fn: Any, reflected: bool) -> Any:
    """An operator whose argument errors reach the caller: torch's own operators turn a
    ``TypeError`` into ``NotImplemented``, which would hide which argument broke which rule."""
    base = getattr(torch.Tensor, name)

    def method(self: Tensor, other: Any) -> Any:
        if not reflected:
            return fn(self, other)
        if isinstance(other, torch.Tensor):
            return fn(other, self)
        scalar = _REFLECTED_SCALAR.get(name)
        return scalar(self, other) if scalar is not None else base(self, other)

    method.__name__ = name
    return method


_REFLECTED_SCALAR: dict[str, Any] = {
    "__radd__": torch.add, "__rmul__": torch.mul, "__rand__": torch.bitwise_and,
    "__ror__": torch.bitwise_or, "__rxor__": torch.bitwise_xor, "__rsub__": torch.rsub,
    "__rtruediv__": lambda t, o: torch.reciprocal(t) * o,
    "__rpow__": lambda t, o: torch.pow(o, t),
}
_OPERATORS = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.div,
    "floordiv": torch.floor_divide, "mod": torch.remainder, "pow": torch.pow,
    "matmul": torch.matmul, "and": torch.bitwise_and, "or": torch.bitwise_or,
    "xor": torch.bitwise_xor,
}
for _name, _fn in _OPERATORS.items():
    setattr(Tensor, f"__{_name}__", _binary(f"__{_name}__", _fn, False))
    setattr(Tensor, f"__r{_name}__", _binary(f"__r{_name}__", _fn, True))
for _name, _fn in {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le,
                   "gt": torch.gt, "ge": torch.ge}.items():
    setattr(Tensor, f"__{_name}__", _binary(f"__{_name}__", _fn, False))
for _name in ("add", "sub", "mul", "div"):
    _inplace = getattr(torch.Tensor, f"{_name}_")
    setattr(Tensor, f"__i{'truediv' if _name == 'div' else _name}__",
            _binary(f"__i{_name}__", _inplace, False))
Tensor.__hash__ = torch.Tensor.__hash__  # type: ignore[method-assign,assignment,unused-ignore]


def mesh_of_arguments(args: Any, kwargs: Any) -> Any:
    """The mesh of the first remote tensor among a call's arguments (None: there is none)."""
    for leaf in tree_leaves((args, kwargs or {})):
        if isinstance(leaf, Tensor):
            return leaf._mesh
    return None


def make(mesh: Any, stream: Stream, ref: int, meta: Meta, fake: Any) -> Tensor:
    """A new remote tensor (``fake`` may be None: made from ``meta`` when needed)."""
    shape, stride, offset, dtype, device = meta
    t: Tensor = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined,unused-ignore]
        Tensor, shape, strides=stride, storage_offset=offset, dtype=dtype, device=device,
        requires_grad=False)
    t._ref = ref
    t._mesh = mesh
    t._stream = stream
    t._meta = meta
    t._fake = fake
    t._dropped = None
    t._access = None
    return t
