"""``to_mesh`` and ``slice_mesh``: remote tensors from one device mesh to another.

The values go from worker to worker, never through the controller: a ``SEND`` in the
source's stream sends each source rank's values to the inboxes of the destination ranks
that take them, and a ``RECV`` in the destination's stream waits for them there (see
``_p2p``). Both sit in their streams where ``to_mesh`` was called, so the ops before and
after it on either mesh see the values as of that point. The controller does not wait (but
once per destination mesh, to learn its workers' inbox ports). Dims are matched by name; a
destination dim the source lacks gets the same value along it.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

from torch.utils._pytree import tree_flatten, tree_unflatten

from .._api._process import runtime
from ._dispatch import fake_of, fake_only, meta_of
from ._errors import bad_arguments
from ._mesh import DeviceMesh, device_mesh_of
from ._messages import RECV, SEND, WorkerError
from ._tensor import Tensor, make

__all__ = ["slice_mesh", "to_mesh"]

_tids = itertools.count(1)
KEEP_PENDING = 256  # transfers per source proc the controller keeps watching
#: source proc address -> (tid, seq, rank, mesh id, values, destination inboxes)
_pending: dict[str, list[tuple[int, int, int, int, int, list[Any]]]] = {}

def to_mesh(tensors: Any, mesh: Any, stream: Any = None) -> Any:
    """The remote tensors of the pytree ``tensors``, moved to ``mesh`` (a ProcMesh or a
    device mesh); other leaves stay as they are.

    Dims are matched by name and must have equal sizes; a dim of the destination the source
    lacks gets the same value along it (with a warning: the data is copied that many times).
    A source dim the destination lacks is an error: take ``slice_mesh`` first.

    Raises:
        ValueError: the meshes' dims do not match.
        TypeError: the tensors are on different meshes, or one was dropped.
    """
    dst = mesh if isinstance(mesh, DeviceMesh) else device_mesh_of(mesh)
    return _move(tensors, dst, {}, stream, "to_mesh")


def slice_mesh(tensors: Any, **coords: int) -> Any:
    """The remote tensors of ``tensors`` on the slice of their mesh at ``coords`` (ints):
    ``slice_mesh(t, gpus=1)`` is ``t`` on the procs whose ``gpus`` is 1, a mesh without
    that dim. The values are copied to the slice's workers."""
    leaves = [t for t in tree_flatten(tensors)[0] if isinstance(t, Tensor)]
    if not leaves:
        return tensors
    src = leaves[0]._mesh
    for d, c in coords.items():
        if d not in src.sizes or type(c) is not int:
            raise ValueError(f"slice_mesh({d}={c!r}): give an int coordinate for each of "
                             f"some dims of {src.labels}")
    src.rank_of({**dict.fromkeys(src.labels, 0), **coords})  # validates the ranges
    dst = device_mesh_of(src.procs.slice(**coords))
    return _move(tensors, dst, coords, None, "slice_mesh")


def _move(tensors: Any, dst: DeviceMesh, fixed: dict[str, int], stream: Any,
          where: str) -> Any:
    leaves, spec = tree_flatten(tensors)
    moving = [(i, t) for i, t in enumerate(leaves) if isinstance(t, Tensor)]
    if not moving:
        return tensors
    src = moving[0][1]._mesh
    if dst is src and not fixed and stream is None:
        return tensors  # already there: nothing moves
    problems = [(f"tensor {i}", "WRONG_MESH") for i, t in moving if t._mesh is not src]
    problems += [(f"tensor {i}", "DROPPED") for i, t in moving if t._dropped]
    if problems:
        raise bad_arguments(where, problems)
    lost = [d for d in src.labels if d not in dst.sizes and d not in fixed]
    unequal = [d for d in src.labels if d in dst.sizes and dst.sizes[d] != src.sizes[d]]
    if lost or unequal:
        why = [f"dims {lost} are missing there (slice_mesh them first)"] if lost else []
        why += [f"dims {unequal} differ in size"] if unequal else []
        raise ValueError(f"{where}: the source mesh {src.sizes} does not fit the destination "
                         f"{dst.sizes}: {' and '.join(why)}")
    extra = [d for d in dst.labels if d not in src.sizes]
    if extra:
        warnings.warn(f"{where}: the destination's dims {extra} are not in the source; its "
                      "value is copied along them", stacklevel=3)
    out = list(leaves)
    results: list[tuple[int, tuple[int, ...]]] = []
    for i, t in moving:
        with fake_only():
            fake = fake_of(t).clone()  # the layout the worker's copy has
        ref = dst.new_ref()
        results.append((ref, tuple(fake.stride())))
        out[i] = make(dst, stream or t._stream, ref, meta_of(fake), fake)
    ports = dst.inbox_ports()
    plan: dict[int, list[Any]] = {}
    for r in range(_size(dst)):
        coords = _coords(dst, r)
        at = {d: coords[d] if d in coords else fixed[d] for d in src.labels}
        plan.setdefault(src.rank_of(at), []).append(ports[r])
    tid = next(_tids)
    refs = [t._ref for _, t in moving]
    seq = src.issue_message(SEND, (tid, refs, plan, src.id))
    src.flush()  # the destination waits for it: it must not sit in our buffer
    _watch(src, plan, tid, seq, len(refs))
    dst.issue_message(RECV, (tid, results))
    return tree_unflatten(out, spec)


def _watch(src: DeviceMesh, plan: dict[int, list[Any]], tid: int, seq: int, n: int) -> None:
    """Remember which inboxes wait for transfer ``tid`` from each source proc, so that if the
    proc dies the controller tells them (their fetches raise instead of waiting for ever)."""
    rt = runtime()
    if _on_death not in rt.death_listeners:
        rt.death_listeners.append(_on_death)
    ranks = src.procs._shape.ranks()
    for r, ports in plan.items():
        waiting = _pending.setdefault(src.procs._proc_addrs[ranks[r]], [])
        waiting.append((tid, seq, r, src.id, n, ports))
        if len(waiting) > KEEP_PENDING:  # long done: a source runs its sends in order
            del waiting[0]


def _on_death(addr: str) -> None:
    """A proc died: its transfers that may not have left fail at their destinations."""
    for tid, seq, rank, mesh_id, n, ports in _pending.pop(addr, []):
        err = WorkerError(seq, rank, "to_mesh", f"the source proc of rank {rank} ({addr}) "
                          "died before its values were known to have left; they never "
                          "arrive", mesh_id)
        for port in ports:
            try:
                port.send((tid, [err] * n))  # unused if the values came first
            except Exception:  # noqa: BLE001 - a destination that is gone waits for nothing
                pass


def _size(mesh: DeviceMesh) -> int:
    n = 1
    for s in mesh.sizes.values():
        n *= s
    return n


def _coords(mesh: DeviceMesh, rank: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in reversed(mesh.labels):
        rank, out[d] = divmod(rank, mesh.sizes[d])
    return dict(reversed(list(out.items())))
