"""Smaller tensor-engine names Monarch exports: ``OpaqueRef``, ``show``, ``set_meta``,
``function_resolvers``, and the ones with no meaning here (``Simulator``, ``world_mesh``),
which raise saying what to use instead."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import register_pytree_node
from torch.utils.weak import WeakTensorKeyDictionary

from ._tensor import Tensor as RemoteTensor

__all__ = ["OpaqueRef", "Simulator", "function_resolvers", "set_meta", "show", "world_mesh"]

#: Functions ``fn -> "module.qualname" | None`` that ``remote()`` asks, in order, how
#: workers should load a function; the first that answers wins, else the function is
#: cloudpickled (by reference when importable). Append your own to send functions by name.
function_resolvers: list[Callable[[Any], str | None]] = []

_objects = WeakTensorKeyDictionary()  # key tensor -> object, on the worker (freed with it)
_keys = itertools.count(1)
on_worker = [False]  # set by TensorWorker in its proc


class OpaqueRef:
    """A handle to a Python object that lives on the workers (a model, a data loader).

    Make one inside a ``remote`` function (``OpaqueRef(model)``) and return it; on the
    controller it is a handle you pass to other ``remote`` functions, where ``ref.value``
    is the object again. Its key travels as a remote int64 tensor, so it is ordered with the
    ops around it and is freed when the handle is. The controller cannot read ``value``.
    """

    def __init__(self, value: Any = None) -> None:
        key = next(_keys)
        self._key: Any = torch.tensor(key, dtype=torch.int64)
        self.check_worker("create")
        if not isinstance(self._key, FakeTensor):
            _objects[self._key] = value

    @classmethod
    def _create(cls, key: Any) -> OpaqueRef:
        ref = cls.__new__(cls)
        ref._key = key
        return ref

    def __reduce__(self) -> tuple[Any, ...]:
        return (OpaqueRef._create, (self._key,))

    def __repr__(self) -> str:
        return f"OpaqueRef({self._key!r})"

    def check_worker(self, what: str) -> None:
        """Raise unless running on a worker (or while propagating shapes on fakes). A key
        that is a remote tensor is the controller's handle, whatever else runs in this
        process (a worker of a mesh on ``this_proc()``, say)."""
        on_controller = isinstance(self._key, RemoteTensor)
        if on_controller or not (on_worker[0] or isinstance(self._key, FakeTensor)):
            raise RuntimeError(f"cannot {what} an OpaqueRef on the controller: it refers "
                               "to an object on the workers; do it inside a remote() "
                               "function")

    @property
    def value(self) -> Any:
        """The object (on a worker only)."""
        self.check_worker("read the value of")
        return _objects[self._key]

    @value.setter
    def value(self, v: Any) -> None:
        self.check_worker("set the value of")
        _objects[self._key] = v


def _flatten(ref: OpaqueRef) -> tuple[list[Any], Any]:
    return [ref._key], None


def _unflatten(leaves: Any, _ctx: Any) -> OpaqueRef:
    return OpaqueRef._create(next(iter(leaves)))


register_pytree_node(OpaqueRef, _flatten, _unflatten)


def show(obj: Any, shard: dict[str, int] | None = None, **coords: int) -> object:
    """Fetch ``obj`` from one rank (as ``inspect``) and display it with ``torchshow``."""
    from ._fetch import inspect

    value = inspect(obj, shard, **coords)
    try:
        import torchshow  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise ImportError("show() displays tensors with the torchshow package, which is not "
                          "installed: pip install torchshow, or print inspect(obj) "
                          "instead") from exc
    from ._active import no_mesh

    with no_mesh.activate():
        return torchshow.show(value)


@contextlib.contextmanager
def set_meta(value: Any) -> Iterator[None]:
    """Accepted for Monarch code: it tags the ops of the block for Monarch's simulator,
    which regency does not have, so here it does nothing."""
    _ = value
    yield


class Simulator:
    """Monarch's simulated tensor-engine backend; regency has none."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "regency has no tensor-engine simulator (Monarch's Simulator models GPU "
            "timings without running ops). Run on real procs instead: "
            "this_host().spawn_procs(per_host={'gpus': N}).activate() works on CPU")


def world_mesh(*args: Any, **kwargs: Any) -> Any:
    """Monarch's legacy ``world_mesh(ctx, hosts, gpu_per_host)`` (monarch_supervisor)."""
    raise NotImplementedError(
        "world_mesh belongs to Monarch's legacy supervisor backend, which regency does not "
        "have: spawn procs with this_host().spawn_procs(per_host={'gpus': N}) (or a job's "
        "hosts) and use them directly; `with procs.activate():` is the device mesh")
