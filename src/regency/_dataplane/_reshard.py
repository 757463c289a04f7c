"""``reshard_into``: fill this process's block of a tensor from the shards that hold it.

What to read comes from a plan (:mod:`._reshard_plan`). A call runs on a thread of its own
(a daemon: a controller that exits does not wait for it): it reads every source's version
word (:mod:`._shards`), the data, and the words again, and keeps the data only when every
word was even, the same, and unchanged; otherwise it reads again, backing off, until its
deadline (counted from the call). The sources are read in parallel; a call waits for all
of them, failed or not, before it ends. A failed read evicts the plan; where the failed
shard has a replica, the call is planned again without the failed owner and retried once
(that plan is kept: the next calls read the replica too). Only a plan's reads are
serialised (its staging buffer is shared), not calls waiting for a version.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from .._api._bootstrap import runtime
from .._api._future import Future
from .._runtime._completion import Completion
from ._blocks import Block
from ._buffer import DEFAULT_TIMEOUT
from ._errors import BufferDroppedError, RDMAError
from ._memory import flat_bytes, local_region
from ._reshard_plan import Plan, Read, forget, on_gpu, plan_for, shard_list, staging_of
from ._shards import ShardVersionError, TensorShard
from ._transfer import read_pieces

__all__ = ["reshard_into"]

_BACKOFF = (0.001, 0.05)  # first and longest wait before reading a changing shard again


def reshard_into(shards: Any, dst: Any, block: Block, *, version: int | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> Future[int]:
    """Fill ``dst`` with the part ``block`` of a global tensor, read from ``shards``.

    ``shards``: the :class:`TensorShard` values of the tensor (a list, or the ValueMesh an
    endpoint returned), whose blocks must cover ``block``; they may hold any layout (rows on
    four ranks, columns on two, replicas). ``dst``: a contiguous, writable CPU or CUDA torch
    tensor or numpy array of ``block.shape`` and the shards' dtype. Each shard's part is read
    one-sidedly (its owner's actor code does not run). ``version``: wait until every shard
    is at that version (see :meth:`TensorShard.updating`); by default any version, the
    same on all. The Future's value is the version read. ``timeout`` counts from this call.
    If the Future fails, what ``dst`` holds is unspecified.

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
    deadline = time.monotonic() + timeout
    given = shard_list(shards)
    rt = runtime()

    failed: set[str] = set()  # owners whose reads failed in this call

    def dead(shard: TensorShard) -> bool:
        control = shard.word_buffer._desc.control
        return control in rt.dead_addrs or control in failed

    plan = plan_for(given, dst, block, dead)
    done = Completion(f"reshard_into of block {block} from {len(plan.sources)} shards")

    def replan(exc: BaseException) -> Plan:
        shard = getattr(exc, "shard", None)
        if shard is not None:
            failed.add(shard.word_buffer._desc.control)
        return plan_for(given, dst, block, dead)

    def run() -> None:
        try:
            done.set_result(_run(plan, replan, dst, version, deadline))
        except BaseException as exc:
            done.set_exception(exc)

    threading.Thread(target=run, name="regency-reshard", daemon=True).start()
    return Future._from(done)


def _run(plan: Plan, replan: Callable[[BaseException], Plan], dst: Any,
         version: int | None, deadline: float) -> int:
    """Execute ``plan``; on a failed read, evict it, and retry once with a new plan if that
    reads other shards (a replica in place of the one whose owner failed)."""
    try:
        return _execute(plan, dst, version, deadline)
    except (RDMAError, BufferDroppedError) as exc:
        forget(plan)
        again = replan(exc)
        if [id(s) for s in again.sources] == [id(s) for s in plan.sources]:
            raise
    return _execute(again, dst, version, deadline)  # kept: the next call reads the same


def _execute(plan: Plan, dst: Any, version: int | None, deadline: float) -> int:
    wait = _BACKOFF[0]
    while True:
        before = _words(plan.sources, deadline)
        ready = _settled(plan.sources, before, version)
        if ready is not None and _read_once(plan, dst, before, deadline):
            return ready
        if time.monotonic() + wait > deadline:
            wanted = "one version" if version is None else f"version {version}"
            raise TimeoutError(f"reshard_into: the shards did not settle on {wanted} in "
                               f"time: {_versions_text(plan.sources, before)}")
        time.sleep(wait)
        wait = min(2 * wait, _BACKOFF[1])


def _read_once(plan: Plan, dst: Any, before: list[int], deadline: float) -> bool:
    """Read the data, and place it if the versions did not change meanwhile. The plan's
    lock is held while it reads (its staging buffer is shared), not while a call waits
    for a version."""
    if not plan.lock.acquire(timeout=max(deadline - time.monotonic(), 0)):
        raise TimeoutError(f"reshard_into of block {plan.block}: another call into the same "
                           "block from the same shards was reading until the deadline")
    try:
        staging = staging_of(plan, dst)
        _move(plan, dst, staging, deadline)
        if _words(plan.sources, deadline) != before:
            return False
        _place(plan, dst, staging)
        return True
    finally:
        plan.lock.release()


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
        state = (f"being updated, or an update failed, after version {w // 2}" if w % 2
                 else f"version {w // 2}")
        parts.append(f"{s.block} of pid {s.word_buffer.owner.pid}: {state}")
    return "; ".join(parts)


def _words(sources: list[TensorShard], deadline: float) -> list[int]:
    out = []
    for s in sources:
        word = bytearray(8)
        _about(s, partial(_read_word, s, word, deadline))
        out.append(int.from_bytes(word, "little"))
    return out


def _read_word(shard: TensorShard, into: bytearray, deadline: float) -> None:
    shard.word_buffer.read_into(into, timeout=_left(deadline)).get()


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)


def _about(shard: TensorShard, fn: Callable[[], object]) -> None:
    """Run ``fn``; a data-plane error it raises names the shard's block and owner."""
    try:
        fn()
    except (RDMAError, BufferDroppedError, TimeoutError) as exc:
        owner = shard.word_buffer.owner
        error: Exception = type(exc)(f"reshard_into: reading block {shard.block} of pid "
                                     f"{owner.pid} on {owner.hostname}: {exc}")
        setattr(error, "shard", shard)  # noqa: B010 - which owner failed, for a retry
        raise error from exc


def _move(plan: Plan, dst: Any, staging: Any, deadline: float) -> None:
    """Read every source's pieces in parallel (host memory: a few calls each; device
    memory: a transfer per piece); wait for all, then raise the first error."""
    flat = flat_bytes(dst)
    _run_all([partial(_read, r, staging if r.staged else flat, deadline)
              for r in plan.reads])


def _read(r: Read, into: Any, deadline: float) -> None:
    buf = r.shard.buffer
    assert buf is not None
    desc = buf._desc
    if desc.on_device or on_gpu(into):
        def by_transfers() -> None:
            futures = [buf[src:src + n].read_into(into[at:at + n], timeout=_left(deadline))
                       for src, at, n in r.pieces]
            _run_all([f.get for f in futures], parallel=False)

        _about(r.shard, by_transfers)
        return
    rt = runtime()
    region = local_region(into, writable=True, what="reshard_into")
    _about(r.shard, lambda: read_pieces(
        desc, region, r.ranges, timeout=_left(deadline), secret=rt.secret,
        dead=lambda: rt.dead_addrs.get(desc.control)))


def _run_all(jobs: Sequence[Callable[[], object]], parallel: bool = True) -> None:
    """Run every job (on daemon threads but the first, when ``parallel``), wait for all,
    then raise the first error."""
    errors: list[BaseException] = []

    def guarded(job: Callable[[], object]) -> None:
        try:
            job()
        except BaseException as exc:
            errors.append(exc)

    here, elsewhere = (jobs[:1], jobs[1:]) if parallel else (jobs, [])
    threads = [threading.Thread(target=guarded, args=(job,), daemon=True,
                                name="regency-reshard-read") for job in elsewhere]
    for t in threads:
        t.start()
    for job in here:
        guarded(job)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _place(plan: Plan, dst: Any, staging: Any) -> None:
    """Copy each staged range's needed part into ``dst`` (on a GPU: finished on return)."""
    for r in plan.reads:
        if not r.staged:
            continue
        (_, at, n), = r.pieces
        box = staging[at:at + n].view(dst.dtype).reshape(r.box.shape)
        dst[r.overlap.relative_to(plan.block)] = box[r.overlap.relative_to(r.box)]
    if on_gpu(dst):
        sys.modules["torch"].cuda.synchronize(dst.device)
