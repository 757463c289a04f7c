"""``remote(fn, propagate=...)``: a Python function run on every rank of the active mesh."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cloudpickle
import torch
from torch.utils._pytree import tree_leaves, tree_map

from .._api._future import Future
from . import _active
from ._dispatch import _fakes, fake_only, issue_python
from ._extras import function_resolvers
from ._messages import GroupRef, Ref
from ._tensor import Tensor, mesh_of_arguments
from ._worker import TensorMeta

__all__ = ["Remote", "call_on_shard_and_fetch", "remote"]


def _spec(fn: Callable[..., Any] | str) -> str | bytes:
    """How workers load ``fn``: a path, or cloudpickle (by reference for importable
    functions, by value for ``__main__`` and lambdas)."""
    if not isinstance(fn, str):
        for resolve in function_resolvers:
            name = resolve(fn)
            if name is not None:
                fn = name
                break
    if isinstance(fn, str):
        module, _, qual = fn.rpartition(".")
        return f"py:{module}:{qual}"
    return cloudpickle.dumps(fn)  # type: ignore[no-any-return,unused-ignore]


class Remote:
    """A function that runs on every rank of the active mesh; see :func:`remote`."""

    def __init__(self, fn: Callable[..., Any] | str,
                 propagate: Callable[..., Any] | str | None = None) -> None:
        if propagate not in (None, "cached", "inspect") and not callable(propagate):
            raise ValueError(f"propagate must be a callable, None, 'cached' or 'inspect', "
                             f"not {propagate!r} ('mocked' is not supported)")
        self._fn = fn
        self._propagate = propagate
        self._spec = _spec(fn)
        self._cache: dict[Any, Any] = {}
        self.__name__ = fn if isinstance(fn, str) else getattr(fn, "__name__", "remote")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run on every rank; the results stay remote (tensors only)."""
        mesh = mesh_for(args, kwargs)
        if self._propagate == "inspect":
            raise TypeError(f"remote {self.__name__} was declared propagate='inspect': its "
                            "results are only fetched; use .call_one() or "
                            "call_on_shard_and_fetch()")
        out = self._outputs(mesh, args, kwargs)
        return issue_python(mesh, self._fn, self._spec, args, kwargs, out)

    rref = __call__

    def _outputs(self, mesh: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if callable(self._propagate):
            with fake_only():
                return self._propagate(*_fakes(args), **_fakes(kwargs))
        key = tuple((t._meta, t.requires_grad) if isinstance(t, Tensor) else repr(t)
                    for t in tree_leaves((args, kwargs)))
        if key in self._cache:
            return self._cache[key]
        if _has_group((args, kwargs)):
            # it joins collectives: run it on every rank (one rank alone would wait for the
            # others forever), and take the first rank's outputs
            fid = mesh.function_id(self._fn, self._spec)
            values = mesh.call_values(fid, tree_map(to_ref, args), tree_map(to_ref, kwargs),
                                      True).result()
            metas = next(iter(values.values()))
        else:
            first = dict.fromkeys(mesh.labels, 0)
            metas = self._call(mesh, args, kwargs, True, first).result()
        with fake_only():
            out = tree_map(lambda m: torch.empty_strided(m[0], m[1], dtype=m[2],
                                                         device=m[3] if len(m) > 3 else "cpu")
                           if isinstance(m, TensorMeta) else m, metas,
                           is_leaf=lambda m: isinstance(m, TensorMeta))
        self._cache[key] = out
        return out

    def _call(self, mesh: Any, args: tuple[Any, ...], kwargs: dict[str, Any], probe: bool,
              coords: dict[str, int]) -> Future[Any]:
        fid = mesh.function_id(self._fn, self._spec)
        return mesh.call_value(fid, tree_map(to_ref, args), tree_map(to_ref, kwargs), probe,
                               coords)  # type: ignore[no-any-return,unused-ignore]

    def call(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run on every rank of the active mesh; a Future of the ValueMesh of the values
        (read it after leaving ``activate()``, or under ``no_mesh``, to use its tensors)."""
        mesh = mesh_for(args, kwargs)
        fid = mesh.function_id(self._fn, self._spec)
        return mesh.call_values(fid, tree_map(to_ref, args),  # type: ignore[no-any-return,unused-ignore]
                                tree_map(to_ref, kwargs))

    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        """Run on every rank of the active mesh for its effects; nothing comes back."""
        mesh = mesh_for(args, kwargs)
        fid = mesh.function_id(self._fn, self._spec)
        mesh.flush()
        mesh.workers.call_value.broadcast(fid, tree_map(to_ref, args), tree_map(to_ref, kwargs),
                                          False)

    def call_one(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run on the active mesh, which must have one rank; a Future of the value."""
        mesh = mesh_for(args, kwargs)
        n = 1
        for s in mesh.sizes.values():
            n *= s
        if n != 1:
            raise ValueError(f"call_one needs a mesh of one rank; the active mesh is {mesh!r}"
                             "; use call_on_shard_and_fetch(fn, ..., shard={...})")
        return self._call(mesh, args, kwargs, False, dict.fromkeys(mesh.labels, 0))


def mesh_for(args: Any, kwargs: Any) -> Any:
    """The mesh a remote function runs on: the active one, else (as Monarch's) the mesh of
    its first remote tensor argument.

    Raises:
        ValueError: no mesh is active and no argument is a remote tensor.
    """
    if _active.any_active():
        return _active.get_active_mesh()
    mesh = mesh_of_arguments(args, kwargs)
    return mesh if mesh is not None else _active.get_active_mesh()  # that raises: activate


def _has_group(tree: Any) -> bool:
    """Whether ``tree`` holds a process group (``procs.process_group(...)``)."""
    return any(isinstance(x, GroupRef) for x in tree_leaves(tree))


def to_ref(t: Any) -> Any:
    """A remote tensor as the Ref a message carries; anything else as it is."""
    return Ref(t._ref) if isinstance(t, Tensor) else t


def remote(fn: Callable[..., Any] | str | None = None, *,
           propagate: Callable[..., Any] | str | None = None) -> Any:
    """Make ``fn`` (a function, or a dotted path the workers import) a remote function.

    ``propagate`` tells the controller the outputs: a callable run on FakeTensors; None or
    ``"cached"`` to run ``fn`` once on the first rank and cache the output structure by input
    metadata; ``"inspect"`` when the results are only fetched. Usable as a decorator.
    """
    if fn is None:
        return lambda f: Remote(f, propagate)
    return Remote(fn, propagate)


def call_on_shard_and_fetch(fn: Remote, *args: Any, shard: dict[str, int] | None = None,
                            **kwargs: Any) -> Future[Any]:
    """Run ``fn`` on one rank of the active mesh (the first when ``shard`` is None) and
    fetch its value."""
    mesh = mesh_for(args, kwargs)
    if _has_group((args, kwargs)) and any(s > 1 for s in mesh.sizes.values()):
        raise TypeError(f"call_on_shard_and_fetch({fn.__name__}): an argument is a process "
                        "group, whose collectives need every rank of the group, but this runs "
                        "the function on one rank only (the others would never join); use "
                        f"{fn.__name__}.call(...), which runs it on every rank and gives each "
                        "rank's value")
    coords = dict.fromkeys(mesh.labels, 0)
    if shard:
        coords.update(shard)
        mesh.rank_of(coords)
    return fn._call(mesh, args, kwargs, False, coords)
