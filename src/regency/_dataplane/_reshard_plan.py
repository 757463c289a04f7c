"""Plans of ``reshard_into``: which ranges of which shards land where, kept for the next call.

A plan says, for a set of shards and a destination block, what to read out of each shard
that overlaps the block: its pieces, each range straight into place (on one host up to a
thousand ranges go in one ``process_vm_readv``), or one contiguous range staged and then
copied into place, when that is cheaper (:func:`._blocks.staged_box` weighs the two with the
cost of a range on the transport). Plans are kept (least recently used dropped past
``_PLANS_KEPT``) for the next call with the same shards, block and kind of destination:
the weight sync of every step computes nothing again. Their staging buffers are kept too,
up to ``_STAGING_KEPT`` bytes in all (the least recently used plans' are freed past it,
and made again when needed).

Where a block is held by several shards (replicas), the reader takes it from one in its
own process, else on its own host, else spreads readers over them by pid; owners known to
be dead are passed over while a live replica is left.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ._blocks import Block, pieces, runs, staged_box
from ._identity import peer_info
from ._memory import is_torch_tensor, local_region
from ._shards import TensorShard, dtype_name
from ._transfer import Ranges, ranges_of

__all__ = ["Plan", "Read", "forget", "kind", "on_gpu", "plan_for", "shard_list",
           "staging_of"]

_PLANS_KEPT = 256
_STAGING_KEPT = 1 << 30

#: What one more range costs, in bytes moved, per transport (measured on a 2-core VM: a
#: range in a ``process_vm_readv`` call takes about 0.65 us, as long as 4 KiB copied; on a
#: data connection, where one READV request names up to 1,022 ranges, about 1 us, as long
#: as 2 KiB sent over TCP or 8 KiB over a Unix socket; into or out of device memory, a copy
#: call is taken as 1 MiB).
_RANGE_COST = {"local": 512, "vm": 4 << 10, "unix": 8 << 10, "tcp": 2 << 10}
_DEVICE_RANGE_COST = 1 << 20


@dataclass(frozen=True)
class Read:
    """One source's part: ``pieces`` (its offset, ours, length) into staging or ``dst``."""

    shard: TensorShard
    pieces: list[tuple[int, int, int]]
    ranges: Ranges  # the pieces, batched once for process_vm_readv
    staged: bool  # into the staging buffer (then placed), else straight into the destination
    box: Block  # what the pieces hold (global coordinates)
    overlap: Block  # what the destination needs of it


@dataclass(eq=False)
class Plan:
    key: tuple[Any, ...]
    block: Block  # the destination's
    reads: list[Read]
    sources: list[TensorShard]  # whose versions a read checks
    staging_bytes: int
    staging: Any = None  # bytes like the destination's (made when needed)
    lock: threading.Lock = field(default_factory=threading.Lock)


_plans: OrderedDict[tuple[Any, ...], Plan] = OrderedDict()
_plans_lock = threading.Lock()


def shard_list(shards: Any) -> list[TensorShard]:
    """The shards given (a list, a ValueMesh, a dict's values), checked to be of one tensor."""
    values = shards.values() if hasattr(shards, "values") else shards
    if not isinstance(values, Iterable):
        raise TypeError(f"shards must be TensorShards (a list or a ValueMesh), got "
                        f"{type(shards).__name__}")
    given = list(values)
    if not given:
        raise ValueError("reshard_into: no shards given")
    for p in given:
        if not isinstance(p, TensorShard):
            raise TypeError(f"reshard_into: expected TensorShard values, got "
                            f"{type(p).__name__}")
    first = given[0]
    for p in given[1:]:
        if (p.shape, p.dtype) != (first.shape, first.dtype):
            raise ValueError(f"reshard_into: the shards are not of one tensor: {first!r} and "
                             f"{p!r} differ in shape or dtype")
    return given


def kind(dst: Any) -> str:
    """What memory ``dst`` is: ``"numpy"``, ``"torch:cpu"``, ``"torch:cuda:0"``..."""
    return f"torch:{dst.device}" if is_torch_tensor(dst) else "numpy"


def on_gpu(obj: Any) -> bool:
    """Whether ``obj`` is a CUDA tensor."""
    return kind(obj).startswith("torch:cuda")


def plan_for(shards: list[TensorShard], dst: Any, block: Block,
             dead: Callable[[TensorShard], bool]) -> Plan:
    """The plan for reading ``block`` of ``shards`` into ``dst`` (kept, or made and kept).

    Raises:
        ValueError, TypeError: ``dst`` or ``block`` does not match the shards, or the shards
            overlap without being replicas, or do not cover ``block``.
    """
    _check_dst(shards[0], dst, block)
    key = (tuple(p.word_buffer._desc for p in shards), block, kind(dst))
    with _plans_lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
            return plan
    plan = _make_plan(key, _choose_replicas(shards, dead), block, dst)
    with _plans_lock:
        _plans[key] = plan
        while len(_plans) > _PLANS_KEPT:
            _plans.popitem(last=False)
    return plan


def forget(plan: Plan) -> None:
    """Drop a plan (its shards failed): the next call makes a new one."""
    with _plans_lock:
        if _plans.get(plan.key) is plan:
            del _plans[plan.key]


def staging_of(plan: Plan, like: Any) -> Any:
    """The plan's staging buffer, made if it was freed; frees the least recently used
    plans' past ``_STAGING_KEPT`` bytes in all."""
    with _plans_lock:
        if plan.staging is None and plan.staging_bytes:
            plan.staging = _empty_bytes(like, plan.staging_bytes)
        held = plan.staging_bytes
        for other in reversed(_plans.values()):
            if other is plan or other.staging is None:
                continue
            if held + other.staging_bytes > _STAGING_KEPT:
                other.staging = None  # a call using it holds its own reference
            else:
                held += other.staging_bytes
        return plan.staging


def _check_dst(first: TensorShard, dst: Any, block: Block) -> None:
    if not isinstance(block, Block):
        raise TypeError(f"block must be a regency.rdma.Block, got {type(block).__name__}")
    if not block.within(first.shape):
        raise ValueError(f"reshard_into: block {block} does not fit in the tensor's shape "
                         f"{first.shape}")
    name, itemsize = dtype_name(dst)
    if (name, itemsize) != (first.dtype, first.itemsize):
        raise ValueError(f"reshard_into: dst is {name}, the shards are {first.dtype}")
    if tuple(dst.shape) != block.shape:
        raise ValueError(f"reshard_into: dst has shape {tuple(dst.shape)}, the block "
                         f"{block.shape}")
    local_region(dst, writable=True, what="reshard_into")


def _choose_replicas(shards: list[TensorShard],
                     dead: Callable[[TensorShard], bool]) -> list[TensorShard]:
    """One shard per distinct block: ours, else one on this host, else spread by our pid;
    a dead owner's only while no live replica is left."""
    me = peer_info()
    by_block: dict[Block, list[TensorShard]] = {}
    for p in shards:
        by_block.setdefault(p.block, []).append(p)

    def rank(p: TensorShard) -> int:
        owner = p.word_buffer._desc.owner
        near = 0 if owner.same_process(me) else 1 if owner.host_key == me.host_key else 2
        return near + (10 if dead(p) else 0)

    chosen = []
    for replicas in by_block.values():
        best = min(rank(p) for p in replicas)
        near = [p for p in replicas if rank(p) == best]
        chosen.append(near[me.pid % len(near)])
    blocks = list(by_block)
    for i, a in enumerate(blocks):
        for b in blocks[i + 1:]:
            if a.intersect(b) is not None:
                raise ValueError(f"reshard_into: shards overlap without being replicas: "
                                 f"{a} and {b}")
    return chosen


def _make_plan(key: tuple[Any, ...], sources: list[TensorShard], block: Block,
               dst: Any) -> Plan:
    reads, staged, covered = [], 0, 0
    on_device = on_gpu(dst)
    for shard in sources:
        overlap = shard.block.intersect(block)
        if overlap is None:
            continue
        assert shard.buffer is not None  # an empty shard overlaps nothing
        covered += overlap.numel
        size = shard.itemsize
        cost = (_DEVICE_RANGE_COST if on_device or shard.buffer._desc.on_device
                else _RANGE_COST.get(shard.buffer.transport_for().name, _DEVICE_RANGE_COST))
        moved = pieces(overlap, shard.block, block, size)
        box = staged_box(overlap, shard.block, len(moved), size, cost)
        if box is None:
            reads.append(Read(shard, moved, ranges_of(moved), False, overlap, overlap))
            continue
        (start, length), = runs(box, shard.block, size)
        moved = [(start, staged, length)]
        reads.append(Read(shard, moved, ranges_of(moved), True, box, overlap))
        staged += length
    if covered != block.numel:
        raise ValueError(f"reshard_into: the shards do not cover block {block}: they "
                         f"hold {covered} of its {block.numel} elements")
    # an empty block reads nothing, but still waits for its version on every shard
    checked = [r.shard for r in reads] if reads else sources
    return Plan(key, block, reads, checked, staged)


def _empty_bytes(like: Any, n: int) -> Any:
    if is_torch_tensor(like):
        import torch

        return torch.empty(n, dtype=torch.uint8, device=like.device)
    import numpy as np

    return np.empty(n, dtype=np.uint8)
