"""What the controller sends to the tensor workers, and the error a worker keeps (no torch).

A batch is a list of tuples, each starting with its kind:

* ``(OP, seq, fn_id, args, kwargs, results, mutates)``: run function ``fn_id`` on ``args``
  (``Ref`` leaves replaced by local values); store the tensor leaves of the result under
  ``results`` (``None`` for a leaf to drop); ``mutates`` are refs the function writes.
* ``(DEFINE, fn_id, name_or_pickle)``: name a function once (``"aten.add.Tensor"``,
  ``"module:qualname"``, or cloudpickled bytes).
* ``(DELETE, refs)``: forget these refs.
* ``(ACTOR, seq, key, refs, ranks, results, mutates, actor_uid, name)``: hand the values of
  ``refs`` to the actor call ``key`` on this proc (ranks in ``ranks`` only); with ``results``
  (``.rref()``), wait for the endpoint's value and store its tensors under ``results``.
  ``results`` may be ``KEEP``: keep the whole value under ``key`` for a ``BIND``.
* ``(BIND, seq, key, refs)``: store the tensors of the value kept under ``key`` under
  ``refs`` (``None``: forget it).
* ``(BORROW, seq, ref, src)``: ``ref`` names the value of ``src`` (a borrow to a stream).
* ``(BORROW_DROP, seq, ref, origin_refs)``: a mutable borrow ends: an error in ``ref``
  reaches ``origin_refs``.
* ``(SEND, seq, tid, refs, ports, mesh_id)``: send the values of ``refs`` (or the error one
  of them holds) to the inbox ports of the destination workers ``ports[rank]`` lists for this
  rank, as transfer ``tid`` (``to_mesh``, worker to worker; see ``_p2p``).
* ``(RECV, seq, tid, results)``: wait for transfer ``tid`` in this worker's inbox and store its
  values under ``results``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ACTOR", "BIND", "BORROW", "BORROW_DROP", "DEFINE", "DELETE", "KEEP", "OP", "RECV",
           "SEND", "GroupRef", "RankRef", "Ref", "WorkerError"]

OP = 0
DEFINE = 1
DELETE = 2
ACTOR = 3
BORROW = 4
BORROW_DROP = 5
BIND = 6
SEND = 7
RECV = 8
#: ``results`` of an ``ACTOR`` message whose outputs are not known yet (cached propagation)
KEEP = -1


class Ref:
    """A remote value by id, in the arguments of a message."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:
        self.id = id

    def __reduce__(self) -> tuple[Any, ...]:
        return (Ref, (self.id,))

    def __repr__(self) -> str:
        return f"Ref({self.id})"


class GroupRef:
    """The worker's torch.distributed process group over mesh dims ``dims``."""

    __slots__ = ("dims",)

    def __init__(self, dims: tuple[str, ...]) -> None:
        self.dims = dims

    def __reduce__(self) -> tuple[Any, ...]:
        return (GroupRef, (self.dims,))

    def __repr__(self) -> str:
        return f"GroupRef({self.dims})"


class RankRef:
    """The worker's linear rank over mesh dims ``dims`` (row-major, as ``Point`` orders)."""

    __slots__ = ("dims",)

    def __init__(self, dims: tuple[str, ...]) -> None:
        self.dims = dims

    def __reduce__(self) -> tuple[Any, ...]:
        return (RankRef, (self.dims,))


class WorkerError:
    """Stored under the results of an op that failed (and of every op that used them).

    ``mesh`` is the id of the device mesh whose stream ``seq`` numbers (0: the mesh the
    error is read from); an error that came over ``to_mesh`` keeps its source's."""

    __slots__ = ("fn", "mesh", "message", "rank", "seq")

    def __init__(self, seq: int, rank: int, fn: str, message: str, mesh: int = 0) -> None:
        self.seq = seq
        self.rank = rank
        self.fn = fn
        self.message = message
        self.mesh = mesh

    def __reduce__(self) -> tuple[Any, ...]:
        return (WorkerError, (self.seq, self.rank, self.fn, self.message, self.mesh))
