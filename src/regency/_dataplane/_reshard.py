"""``reshard_into``: fill this process's block of a tensor from the shards that hold it.

A *plan* says, for a set of shards and a destination block, which byte ranges to read out
of which shard and where they land: straight into the destination, range by range (host
memory on one host: a few ``process_vm_readv`` calls for up to a thousand ranges each), or
a contiguous slab of the shard into a staging buffer and then copied into place, when that
is cheaper (:mod:`._blocks` weighs one against the other with the cost of a range on the
transport). Plans, and their staging buffers, are kept for the next call with the same
shards, block and kind of destination: the weight sync of every training step computes
nothing again. Where a block is held by several shards (replicas), the reader takes it
from one in its own process, else on its own host, else spreads readers over them.

A read is checked against the shards' version words (:mod:`._shards`): every shard at the
same even version before and after the data moved, else it is read again, until the
deadline.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .._api._bootstrap import runtime
from .._api._future import Future
from .._runtime._completion import Completion
from ._blocks import Block, pieces, read_box, runs
from ._buffer import DEFAULT_TIMEOUT, RDMABuffer
from ._identity import peer_info
from ._memory import local_region
from ._shards import ShardVersionError, TensorShard, dtype_name
from ._transfer import read_pieces

__all__ = ["reshard_into"]

_PLANS_KEPT = 32
_BACKOFF = (0.001, 0.05)  # first and longest wait before reading a changing shard again


#: What one more range costs, in bytes moved, per transport (measured on a 2-core VM: a
#: range in a ``process_vm_readv`` call takes about 0.65 us, as long as 4 KiB copied; a
#: request on a data connection about 250 us; into or out of device memory, a copy call is
#: taken as 1 MiB).
_RANGE_COST = {"local": 512, "vm": 4 << 10, "unix": 256 << 10, "tcp": 256 << 10}
_DEVICE_RANGE_COST = 1 << 20


@dataclass(frozen=True)
class _Read:
    """One source's part: ``pieces`` (its offset, ours, length) into staging or ``dst``."""

    shard: TensorShard
    pieces: list[tuple[int, int, int]]
    staged: bool  # into the staging buffer (then placed), else straight into the destination
    box: Block  # what the pieces hold (global coordinates)
    overlap: Block  # what the destination needs of it


@dataclass
class _Plan:
    block: Block  # the destination's
    reads: list[_Read]
    sources: list[TensorShard]
    staging: Any  # a buffer of bytes like the destination (None: nothing is staged)
    lock: threading.Lock = field(default_factory=threading.Lock)


_plans: OrderedDict[tuple[Any, ...], _Plan] = OrderedDict()
_plans_lock = threading.Lock()
_pools: dict[str, ThreadPoolExecutor] = {}


def _pool(name: str) -> ThreadPoolExecutor:
    """``"calls"`` runs reshards, ``"reads"`` their sources' reads (a reshard waits for its
    reads: one pool for both could fill with waiters)."""
    with _plans_lock:
        pool = _pools.get(name)
        if pool is None:
            pool = _pools[name] = ThreadPoolExecutor(4, thread_name_prefix=f"regency-{name}")
        return pool


def reshard_into(shards: Any, dst: Any, block: Block, *, version: int | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> Future[int]:
    """Fill ``dst`` with the part ``block`` of a global tensor, read from ``shards``.

    ``shards``: the :class:`TensorShard` values of the tensor (a list, or the ValueMesh an
    endpoint returned), whose blocks must cover ``block``; they may hold any layout (rows on
    four ranks, columns on two, replicas). ``dst``: a contiguous, writable CPU or CUDA torch
    tensor or numpy array of ``block.shape`` and the shards' dtype. Each shard's part is read
    one-sidedly (its owner's actor code does not run). ``version``: wait until every shard
    is at that version (see :meth:`TensorShard.updating`); by default any version, the
    same on all. The Future's value is the version read.

    Raises (at once):
        ValueError, TypeError: the shards disagree (shape, dtype), overlap, or do not cover
            ``block``; ``dst`` does not match.
    The Future fails with ``ShardVersionError`` if a shard is already past ``version``,
    ``TimeoutError`` if they did not settle on one version in ``timeout`` seconds, and like
    ``RDMABuffer.read_into`` if a transfer fails.
    """
    timeout = float(timeout)
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    plan = _plan_for(_shard_list(shards), dst, block)
    done = Completion(f"reshard_into of {block.numel} elements from {len(plan.sources)} shards")

    def run() -> None:
        try:
            done.set_result(_execute(plan, dst, version, time.monotonic() + timeout))
        except BaseException as exc:
            done.set_exception(exc)

    _pool("calls").submit(run)
    return Future._from(done)


# -- checking and planning -----------------------------------------------------------------
def _shard_list(shards: Any) -> list[TensorShard]:
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


def _plan_for(shards: list[TensorShard], dst: Any, block: Block) -> _Plan:
    _check_dst(shards[0], dst, block)
    key = (tuple(p.buffer._desc for p in shards), block, _kind(dst))
    with _plans_lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
            return plan
    plan = _make_plan(_choose_replicas(shards), block, dst)
    with _plans_lock:
        _plans[key] = plan
        while len(_plans) > _PLANS_KEPT:
            _plans.popitem(last=False)
    return plan


def _kind(dst: Any) -> str:
    """What memory ``dst`` is: ``"numpy"``, ``"torch:cpu"``, ``"torch:cuda:0"``..."""
    return f"torch:{dst.device}" if _is_torch(dst) else "numpy"


def _choose_replicas(shards: list[TensorShard]) -> list[TensorShard]:
    """One shard per distinct block: ours, else one on this host, else spread by our pid."""
    me = peer_info()
    by_block: dict[Block, list[TensorShard]] = {}
    for p in shards:
        by_block.setdefault(p.block, []).append(p)

    def rank(p: TensorShard) -> int:
        owner = p.buffer._desc.owner
        return 0 if owner.same_process(me) else 1 if owner.host_key == me.host_key else 2

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


def _make_plan(sources: list[TensorShard], block: Block, dst: Any) -> _Plan:
    reads, staged, covered = [], 0, 0
    on_device = _kind(dst).startswith("torch:cuda")
    for shard in sources:
        overlap = shard.block.intersect(block)
        if overlap is None:
            continue
        covered += overlap.numel
        size = shard.itemsize
        cost = (_DEVICE_RANGE_COST if on_device or shard.buffer._desc.on_device
                else _RANGE_COST.get(shard.buffer.transport_for().name, _DEVICE_RANGE_COST))
        box = read_box(overlap, shard.block, size, cost)
        if box == overlap:
            reads.append(_Read(shard, pieces(box, shard.block, block, size), False, box,
                               overlap))
            continue
        (start, length), = runs(box, shard.block, size)
        reads.append(_Read(shard, [(start, staged, length)], True, box, overlap))
        staged += length
    if covered != block.numel:
        raise ValueError(f"reshard_into: the shards do not cover block {block}: they "
                         f"hold {covered} of its {block.numel} elements")
    staging = _empty_bytes(dst, staged) if staged else None
    return _Plan(block, reads, [r.shard for r in reads], staging)


# -- running -------------------------------------------------------------------------------
def _execute(plan: _Plan, dst: Any, version: int | None, deadline: float) -> int:
    with plan.lock:  # one call at a time uses a plan's staging buffer
        wait = _BACKOFF[0]
        while True:
            before = _words(plan.sources, deadline)
            ready = _settled(plan.sources, before, version)
            if ready is not None:
                _move(plan, dst, deadline)
                if _words(plan.sources, deadline) == before:
                    _place(plan, dst)
                    return ready
            if time.monotonic() + wait > deadline:
                raise TimeoutError(f"reshard_into: the shards did not settle on "
                                   f"{'one version' if version is None else f'version {version}'}"
                                   f" in time: {_versions_text(plan.sources, before)}")
            time.sleep(wait)
            wait = min(2 * wait, _BACKOFF[1])


def _settled(sources: list[TensorShard], words: list[int], version: int | None) -> int | None:
    """The version all shards are at, or None while one changes or lags.

    Raises:
        ShardVersionError: a shard is past ``version``: it cannot be read any more.
    """
    if version is not None:
        past = [s for s, w in zip(sources, words, strict=True) if w // 2 > version]
        if past:
            raise ShardVersionError(f"reshard_into(version={version}): shards are already "
                                    f"past it: {_versions_text(sources, words)}")
    if any(w % 2 for w in words) or len(set(words)) != 1:
        return None
    got = words[0] // 2
    return got if version is None or got == version else None


def _versions_text(sources: list[TensorShard], words: list[int]) -> str:
    parts = []
    for s, w in zip(sources, words, strict=True):
        state = f"updating to a version after {w // 2}" if w % 2 else f"version {w // 2}"
        parts.append(f"{s.block} of pid {s.buffer.owner.pid}: {state}")
    return "; ".join(parts)


def _words(sources: list[TensorShard], deadline: float) -> list[int]:
    out = []
    for s in sources:
        word = bytearray(8)
        s.word_buffer.read_into(word, timeout=_left(deadline)).get()
        out.append(int.from_bytes(word, "little"))
    return out


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)


def _empty_bytes(like: Any, n: int) -> Any:
    if _is_torch(like):
        import torch

        return torch.empty(n, dtype=torch.uint8, device=like.device)
    import numpy as np

    return np.empty(n, dtype=np.uint8)


def _is_torch(obj: Any) -> bool:
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _bytes_view(dst: Any) -> Any:
    if _is_torch(dst):
        import torch

        return dst.reshape(-1).view(torch.uint8)
    return dst.reshape(-1).view("uint8")


def _move(plan: _Plan, dst: Any, deadline: float) -> None:
    """Read every source's pieces: host memory in a few calls per source, in parallel across
    sources; device memory a transfer per piece."""
    flat = _bytes_view(dst)
    transfers: list[Future[None]] = []
    reads = []
    for r in plan.reads:
        into = plan.staging if r.staged else flat
        if r.shard.buffer._desc.on_device or _kind(into).startswith("torch:cuda"):
            transfers.extend(_slices(r, into, deadline))
        else:
            reads.append(_pool("reads").submit(_read_pieces, r, into, deadline))
    for f in transfers:
        f.get()
    for job in reads:
        job.result()


def _slices(r: _Read, into: Any, deadline: float) -> list[Future[None]]:
    buf: RDMABuffer = r.shard.buffer
    return [buf[src:src + n].read_into(into[at:at + n], timeout=_left(deadline))
            for src, at, n in r.pieces]


def _read_pieces(r: _Read, into: Any, deadline: float) -> None:
    rt = runtime()
    desc = r.shard.buffer._desc
    read_pieces(desc, local_region(into, writable=True, what="reshard_into"), r.pieces,
                timeout=_left(deadline), secret=rt.secret,
                dead=lambda: rt.dead_addrs.get(desc.control))


def _place(plan: _Plan, dst: Any) -> None:
    """Copy each staged slab's needed part into ``dst``."""
    for r in plan.reads:
        if not r.staged:
            continue
        (_, at, n), = r.pieces
        box = plan.staging[at:at + n].view(dst.dtype).reshape(r.box.shape)
        dst[r.overlap.relative_to(plan.block)] = box[r.overlap.relative_to(r.box)]
