"""Large arguments and results between procs of one host go through shared memory.

The receiver maps the sender's segment copy-on-write, so what it gets is writable and its
own; the sender reuses a segment only once every mapping of it is gone, so nothing a
receiver keeps ever changes; pools stay bounded and descriptors do not leak.
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from _shm_actors import Holder, is_shared

from regency import config
from regency._runtime import _current
from regency.actor import SupervisionError, this_host
from regency.testing import kill_rank

pytestmark = pytest.mark.timeout(120)
T = 60
MiB = 1 << 20


@pytest.fixture(scope="module")
def holder():
    procs = this_host().spawn_procs(per_host={"p": 1}, name="shm")
    yield procs.spawn("holder", Holder)
    procs.stop().get(timeout=T)


def controller_pool():
    rt = _current.get()
    assert rt is not None
    return rt.router.shm_pool


def test_large_arguments_and_results_arrive_as_shared_memory(holder) -> None:
    a = np.arange(4 * MiB, dtype=np.uint8)
    assert holder.shared.call_one(a).get(timeout=T)
    assert not holder.shared.call_one(a[: MiB // 2]).get(timeout=T)  # under the threshold
    b = holder.echo.call_one(a).get(timeout=T)
    assert is_shared(b) and np.array_equal(a, b)


def test_what_arrives_is_writable_and_private(holder) -> None:
    a = np.zeros(2 * MiB, dtype=np.int64)
    assert holder.add_one_in_place.call_one(a).get(timeout=T) == 1
    assert a[0] == 0  # the sender's array is untouched
    b = holder.echo.call_one(a).get(timeout=T)
    b += 5
    c = holder.echo.call_one(a).get(timeout=T)
    assert b[0] == 5 and c[0] == 0


def test_what_a_receiver_keeps_never_changes_under_it(holder) -> None:
    base = holder.keep.call_one(np.zeros(1, np.int64)).get(timeout=T)
    arrays = [np.full(MiB, i, dtype=np.int64) for i in range(1, 9)]
    for a in arrays:
        holder.keep.call_one(a).get(timeout=T)
    sums = holder.kept_sums.call_one().get(timeout=T)[base:]
    assert sums == [int(a.sum()) for a in arrays]


def test_segments_are_reused_and_pools_stay_bounded(holder) -> None:
    a = np.ones(8 * MiB, dtype=np.uint8)
    for _ in range(3):
        holder.echo.call_one(a).get(timeout=T)
    gc.collect()
    mine, theirs = controller_pool().held_bytes(), holder.pool_bytes.call_one().get(timeout=T)
    fds = len(os.listdir("/proc/self/fd"))
    actor_fds = holder.open_fds.call_one().get(timeout=T)
    for _ in range(30):
        out = holder.echo.call_one(a).get(timeout=T)
        assert out.nbytes == a.nbytes
        del out
    gc.collect()
    assert controller_pool().held_bytes() <= mine + 16 * MiB  # not 30 more segments
    assert holder.pool_bytes.call_one().get(timeout=T) <= theirs + 16 * MiB
    # a leak would be one or two per echo (60 here); a few new segments cost two each
    assert len(os.listdir("/proc/self/fd")) <= fds + 8
    assert holder.open_fds.call_one().get(timeout=T) <= actor_fds + 8


def test_torch_tensors_travel_through_shared_memory(holder) -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(MiB, dtype=torch.float32)
    out = holder.echo.call_one(t).get(timeout=T)
    assert isinstance(out, torch.Tensor) and torch.equal(out, t) and is_shared(out)


def test_the_threshold_is_configurable() -> None:
    with config.configured(shm_min_bytes=0):
        procs = this_host().spawn_procs(per_host={"p": 1}, name="noshm")
        try:
            h = procs.spawn("holder", Holder)
            assert not h.shared.call_one(np.zeros(4 * MiB, np.uint8)).get(timeout=T)
        finally:
            procs.stop().get(timeout=T)


def test_a_killed_receiver_takes_its_segments_with_it(unhandled_failures) -> None:
    procs = this_host().spawn_procs(per_host={"p": 1}, name="victim")
    try:
        h = procs.spawn("holder", Holder)
        before = controller_pool().held_bytes()
        h.keep.call_one(np.ones(16 * MiB, np.uint8)).get(timeout=T)
        assert controller_pool().held_bytes() >= before + 16 * MiB
        kill_rank(procs, 0)
        with pytest.raises(SupervisionError):
            h.keep.call_one(np.ones(16 * MiB, np.uint8)).get(timeout=T)
        assert controller_pool().held_bytes() <= before
        unhandled_failures.wait_for("SIGKILL")
    finally:
        procs.stop().get(timeout=T)


def test_structured_and_multidimensional_arrays_through_shared_memory(holder) -> None:
    rec = np.zeros(MiB // 8, dtype=[("a", "<i4"), ("b", "<f4"), ("c", "u1", (8,))])
    rec["a"] = np.arange(len(rec))
    grid = np.arange(2 * MiB, dtype=np.float32).reshape(1024, -1)
    fortran = np.asfortranarray(grid)
    for a in (rec, grid, fortran):
        b = holder.echo.call_one(a).get(timeout=T)
        assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b)


def test_the_first_message_to_fresh_procs_may_carry_shared_memory() -> None:
    """A new proc's first frame can follow the handshake at once, descriptor and all (the
    handshake must not read past its end, or the descriptor is lost)."""
    a = np.arange(4 * MiB, dtype=np.uint8)
    for i in range(6):
        procs = this_host().spawn_procs(per_host={"p": 2}, name=f"fresh{i}")
        try:
            h = procs.spawn("holder", Holder)
            assert all(h.shared.call(a).get(timeout=T).values())
        finally:
            procs.stop().get(timeout=T)


def test_what_arrived_outlives_its_sender(unhandled_failures) -> None:
    """A result mapped from a proc's segment stays valid after that proc is killed."""
    procs = this_host().spawn_procs(per_host={"p": 1}, name="sender")
    try:
        h = procs.spawn("holder", Holder)
        a = np.arange(8 * MiB, dtype=np.uint8)
        b = h.echo.call_one(a).get(timeout=T)
        assert is_shared(b)
        kill_rank(procs, 0)
        with pytest.raises(SupervisionError):
            h.echo.call_one(a[:10]).get(timeout=T)
        assert np.array_equal(a, b)  # the pages live as long as our mapping
        b[:] = 0  # and are still ours to write
        assert not b.any()
    finally:
        procs.stop().get(timeout=T)


def test_many_threads_echoing_large_arrays_at_once_get_their_own_back(holder) -> None:
    """Pool, write queue and descriptors under contention: every reply is its own request's."""
    from concurrent.futures import ThreadPoolExecutor

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(8):
            a = rng.integers(0, 255, size=int(rng.integers(1, 5)) * MiB, dtype=np.uint8)
            pending = [holder.echo.call_one(a) for _ in range(2)]  # two in flight
            for f in pending:
                assert np.array_equal(f.get(timeout=T), a)

    with ThreadPoolExecutor(4) as pool:
        for f in [pool.submit(worker, s) for s in range(4)]:
            f.result(timeout=T)
