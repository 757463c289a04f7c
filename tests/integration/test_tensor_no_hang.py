"""No fetch ever hangs (issue 13, item 7): collectives whose input failed on some ranks, remote
functions with process groups, a rank that never joins a collective, a proc killed mid-op.

Real procs, real gloo groups; every fetch and every test is bounded. Skips without torch.
"""

from __future__ import annotations

import math
import os
import signal
import tempfile
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import regency.actor as ra  # noqa: E402
from regency import (  # noqa: E402
    RemoteException,
    call_on_shard_and_fetch,
    fetch_shard,
    reduce,
    reduce_,
    remote,
)
from regency.actor import SupervisionError, this_host  # noqa: E402
from regency.config import configured  # noqa: E402

T = 60
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2}, name="nohang")
    with procs.activate():
        warm = reduce(procs.rank_tensor(("hosts", "gpus")).float(), ())  # groups made
    assert fetch_shard(warm).get(timeout=T).item() == 6.0
    yield procs
    procs.stop().get(timeout=T)


def fetch(t, **coords):
    return fetch_shard(t, **coords).get(timeout=T)


def _boom_on_rank_one(t: torch.Tensor) -> torch.Tensor:
    if int(t) == 1:
        raise ValueError("boom on rank 1 only")
    return t.float()


def _all_sum(t: torch.Tensor, group: object) -> torch.Tensor:
    import torch.distributed as dist

    t = t.clone()
    dist.all_reduce(t, group=group)
    return t


def test_reduce_of_a_value_that_failed_on_one_rank_fails_its_group_only(procs) -> None:
    with procs.activate():
        r = procs.rank_tensor(("hosts", "gpus"))
        picked = torch.arange(3.0)[r]  # rank 3 (hosts=1, gpus=1): index 3 is out of range
        by_gpus = reduce(picked, "gpus")  # groups {0, 1} (fine) and {2, 3} (rank 3 failed)
        by_all = reduce(picked, ())
        independent = r * 2
    for g in range(2):
        with pytest.raises(RemoteException, match="index out of range") as info:
            fetch(by_gpus, hosts=1, gpus=g)
        assert info.value.rank == 3  # the original error, from where it happened
        assert "picked = torch.arange(3.0)[r]" in info.value.controller_frames
    assert fetch(by_gpus, hosts=0, gpus=1).item() == 1.0  # 0 + 1: its group is whole
    for h in range(2):
        with pytest.raises(RemoteException, match="index out of range"):
            fetch(by_all, hosts=h, gpus=0)
    assert fetch(independent, hosts=1, gpus=1).item() == 6
    with procs.activate():
        later = reduce(r.float(), ())  # the mesh's collectives keep working
    assert fetch(later, hosts=1, gpus=1).item() == 6.0


def test_reduce_in_place_of_a_failed_value_fails_every_rank(procs) -> None:
    with procs.activate():
        r = procs.rank_tensor("gpus")
        bad = remote(_boom_on_rank_one, propagate=lambda t: t.float())(r)
        reduce_(bad, "gpus", "max")
        after = bad + 1
        fine = reduce(r.float(), "gpus")
    for h in range(2):
        for g in range(2):
            with pytest.raises(RemoteException, match="boom on rank 1 only") as info:
                fetch(after, hosts=h, gpus=g)
            assert info.value.rank in (1, 3)  # gpus=1 of its own group
    assert fetch(fine, hosts=1, gpus=0).item() == 1.0


def _fail_where_gpus_is_one(t: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    if int(r) == 1:
        raise ValueError("failed where gpus=1")
    return t


@pytest.mark.parametrize("reduction,dtype,scatter", [
    (red, torch.float32, False) for red in ("sum", "avg", "product", "min", "max", "stack")
] + [
    (red, torch.int64, False) for red in ("sum", "min", "max", "product", "band", "bor",
                                          "bxor", "stack")
] + [("sum", torch.float32, True), ("stack", torch.float32, True),
     ("max", torch.float16, False), ("sum", torch.complex64, False)])
def test_every_reduction_of_a_failed_input_fails_every_rank_of_the_group(
        procs, reduction, dtype, scatter) -> None:
    with procs.activate():
        r = procs.rank_tensor("gpus")
        v = ((torch.arange(6).reshape(2, 3) + 1) * (r + 1)).to(dtype)  # dim 0: gpus' size
        bad = remote(_fail_where_gpus_is_one, propagate=lambda t, r: t)(v, r)
        out = reduce(bad, "gpus", reduction, scatter=scatter)
        fine = reduce(v, "gpus", reduction, scatter=scatter)
    for h, g in ((0, 0), (1, 1)):
        with pytest.raises(RemoteException, match="failed where gpus=1"):
            fetch(out, hosts=h, gpus=g)
    local = [((torch.arange(6).reshape(2, 3) + 1) * (g + 1)).to(dtype) for g in range(2)]
    assert fetch(fine, hosts=1, gpus=0).shape == local_result(local, reduction, scatter).shape


def local_result(parts, reduction, scatter):
    stacked = torch.stack(parts)
    if reduction == "stack":
        return stacked[:, 0] if scatter else stacked
    whole = stacked.sum(0)
    return whole[0] if scatter else whole


@pytest.mark.parametrize("reduction,values,expected", [
    ("sum", [math.nan, 1.0], [math.nan, 2.0]),  # a real NaN where a failure would show
    ("min", [-math.inf, 1.0], [-math.inf, 1.0]),
    ("stack", [math.nan, 1.0], [[math.nan, 1.0], [math.nan, 1.0]]),
])
def test_a_real_value_like_a_failed_ranks_placeholder_is_kept(
        procs, reduction, values, expected) -> None:
    with procs.activate():
        out = reduce(torch.tensor(values), "gpus", reduction)
    got = fetch(out, hosts=0, gpus=1)
    assert torch.equal(got.isnan(), torch.tensor(expected).isnan())
    assert torch.equal(got.nan_to_num(), torch.tensor(expected).nan_to_num())


def test_an_integer_minimum_like_a_placeholder_is_kept(procs) -> None:
    low = torch.iinfo(torch.int64).min
    with procs.activate():
        out = reduce(torch.tensor([low, 5]), "gpus", "min")
    assert fetch(out, hosts=1, gpus=1).tolist() == [low, 5]


def test_remote_function_with_a_group_whose_input_failed_on_one_rank(procs) -> None:
    group = procs.process_group("gpus")
    with procs.activate():
        r = procs.rank_tensor("gpus")
        bad = remote(_boom_on_rank_one, propagate=lambda t: t.float())(r)
        out = remote(_all_sum, propagate=lambda t, g: t)(bad, group)
        values = remote(_all_sum).call(bad, group)  # every rank, fetched: fails, no hang
    with pytest.raises(RemoteException, match="boom on rank 1 only"):
        fetch(out, hosts=0, gpus=0)
    with pytest.raises(RemoteException, match="boom on rank 1 only"):
        values.get(timeout=T)


def test_remote_function_with_a_group_and_no_propagate(procs) -> None:
    group = procs.process_group("hosts")
    all_sum = remote(_all_sum)  # outputs learned by a run: on every rank, as it has a group
    with procs.activate():
        r = procs.rank_tensor(("hosts", "gpus")).float()
        out = all_sum(r, group)
        again = all_sum(r + 1, group)  # cached: no second probe
    assert out.shape == ()
    assert fetch(out, hosts=0, gpus=1).item() == 4.0  # 1 + 3
    assert fetch(again, hosts=1, gpus=0).item() == 4.0  # 1 + 3
    with procs.activate(), pytest.raises(TypeError, match="process group"):
        call_on_shard_and_fetch(all_sum, r, group, shard={"hosts": 0, "gpus": 1})


def _raise_on_rank_one_then_all_sum(t: torch.Tensor, group: object) -> torch.Tensor:
    if int(t) == 1:
        raise ValueError("rank 1 never reaches the collective")
    return _all_sum(t.float(), group)


def test_a_rank_that_never_joins_a_collective_fails_it_by_the_timeout() -> None:
    with configured(collective_timeout=10.0):  # long enough for a busy rendezvous
        procs = this_host().spawn_procs(per_host={"gpus": 2}, name="nohang-late")
        try:
            group = procs.process_group("gpus")
            with procs.activate():
                r = procs.rank_tensor("gpus")
                out = remote(_raise_on_rank_one_then_all_sum, propagate=lambda t, g: t.float())(
                    r, group)
            with pytest.raises(RemoteException, match="never reaches the collective"):
                fetch(out, gpus=1)
            with pytest.raises(RemoteException, match=r"[Tt]imed out"):
                fetch(out, gpus=0)  # the other rank waited collective_timeout, not forever
        finally:
            procs.stop().get(timeout=T)


def _pid_then_wait_on_rank_one(t: torch.Tensor, where: str) -> torch.Tensor:
    if int(t) == 1:
        Path(where).write_text(str(os.getpid()))
        time.sleep(3600)  # killed (SIGKILL) by the test in here
    return t.float()


def test_a_proc_killed_mid_collective_fails_the_fetches(monkeypatch) -> None:
    monkeypatch.setattr(ra, "unhandled_fault_hook", lambda failure: None)
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="nohang-kill")
    where = Path(tempfile.mkdtemp()) / "pid"
    try:
        with procs.activate():
            r = procs.rank_tensor("gpus")
            warm = reduce(r.float(), "gpus")
        assert fetch(warm, gpus=1).item() == 1.0  # the group is up: its connections are open
        with procs.activate():
            slow = remote(_pid_then_wait_on_rank_one, propagate=lambda t, w: t.float())(
                r, str(where))
            total = reduce(slow, "gpus")  # rank 0 enters the all-reduce; rank 1 never will
        deadline = time.monotonic() + T
        while not where.exists() or not where.read_text():
            assert time.monotonic() < deadline, "rank 1 never started its op"
            time.sleep(0.05)
        os.kill(int(where.read_text()), signal.SIGKILL)
        with pytest.raises(SupervisionError):
            fetch(total, gpus=1)
        with pytest.raises(RemoteException) as info:
            fetch(total, gpus=0)  # the survivor: its collective failed, it did not hang
        note = info.value.worker_error_string
        assert "rank 1 of this mesh (gpus=1, proc " in note and "has died (" in note, note
        assert fetch(r, gpus=0).item() == 0  # the survivor still answers
        _moves_to_and_from_a_mesh_with_a_dead_rank_fail_without_hanging(procs, r)
    finally:
        procs.stop().get(timeout=T)


def _moves_to_and_from_a_mesh_with_a_dead_rank_fail_without_hanging(procs, r) -> None:
    """``to_mesh`` from and to ``procs``, whose rank gpus=1 is dead: the move is refused at
    the call, or the fetch of what the dead rank sent (or was sent) fails; none hangs."""
    other = this_host().spawn_procs(per_host={"gpus": 2}, name="nohang-other")
    try:
        with other.activate():
            mine = other.rank_tensor("gpus") + 10
        for source, destination in ((r, other), (mine, procs)):
            try:
                moved = source.to_mesh(destination)
            except SupervisionError:
                continue
            with pytest.raises((SupervisionError, RemoteException)):
                fetch(moved, gpus=1)
        assert fetch(mine, gpus=1).item() == 11  # the other mesh is unharmed
    finally:
        other.stop().get(timeout=T)
