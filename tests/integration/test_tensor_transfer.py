"""``to_mesh`` between pipeline stages: the values go worker to worker, in stream order.

Real procs on two meshes; every fetch is bounded. Skips without torch.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import regency  # noqa: E402
from regency import RemoteException, fetch_shard, remote  # noqa: E402
from regency.actor import this_host  # noqa: E402

T = 60


def _mesh(procs):
    return regency._tensor.api.device_mesh_of(procs)


def _boom(t):
    raise ValueError("stage 0 failed on purpose")


@pytest.fixture(scope="module")
def stages():
    a = this_host().spawn_procs(per_host={"gpus": 2}, name="stage0")
    b = this_host().spawn_procs(per_host={"gpus": 2}, name="stage1")
    yield a, b
    a.stop().get(timeout=T)
    b.stop().get(timeout=T)


def test_pipeline_stages_move_values_worker_to_worker(stages) -> None:
    a, b = stages
    src, dst = _mesh(a), _mesh(b)
    with a.activate():
        w = torch.ones(4, 4) * (a.rank_tensor("gpus") + 1)
        h = torch.relu(w @ torch.ones(4, 4))  # a stage's activations
    before = (src.values_received, dst.values_received)
    with b.activate():
        got = h.to_mesh(b)
        out = (got * 2).sum(0)  # the next stage's ops follow the transfer in its stream
    with a.activate():
        h.add_(1000)  # a later write on the source does not reach what was sent
    assert (src.values_received, dst.values_received) == before  # nothing came through here
    assert fetch_shard(out, gpus=0).get(timeout=T).tolist() == [32.0] * 4
    assert fetch_shard(out, gpus=1).get(timeout=T).tolist() == [64.0] * 4
    assert src.values_received == before[0]  # the source was never fetched


def test_transfers_keep_order_with_ops_on_both_meshes(stages) -> None:
    a, b = stages
    with a.activate():
        x = torch.zeros(3)
        x.add_(1)
    with b.activate():
        first = x.to_mesh(b)  # x is 1 here
    with a.activate():
        x.add_(1)
    with b.activate():
        second = x.to_mesh(b)  # and 2 here
        acc = torch.zeros(3)
        acc.add_(first)
        acc.mul_(10)
        acc.add_(second)
    with a.activate():
        back = acc.to_mesh(a) + x  # and back: 12 + 2
    assert fetch_shard(acc, gpus=1).get(timeout=T).tolist() == [12.0] * 3
    assert fetch_shard(back, gpus=0).get(timeout=T).tolist() == [14.0] * 3


def test_a_failed_source_op_raises_at_the_destination_fetch(stages) -> None:
    a, b = stages
    with a.activate():
        x = torch.ones(2)
        bad = remote(_boom, propagate=lambda t: t)(x)  # this line is in the traceback
        fine = x * 3
    with b.activate():
        moved, ok = regency.to_mesh((bad, fine), b)
        later = moved + 1
    with pytest.raises(RemoteException, match="stage 0 failed on purpose") as info:
        fetch_shard(later, gpus=1).get(timeout=T)
    assert "bad = remote(_boom" in str(info.value)  # where the source op was issued
    with pytest.raises(RemoteException):
        fetch_shard(moved, gpus=0).get(timeout=T)
    assert fetch_shard(ok, gpus=0).get(timeout=T).tolist() == [3.0, 3.0]


def test_a_transposed_value_keeps_its_layout(stages) -> None:
    a, b = stages
    with a.activate():
        t = torch.arange(6.0).reshape(2, 3).t()  # strides (1, 3)
    with b.activate():
        moved = t.to_mesh(b)
        row = moved[1]  # a view computed from the controller's metadata
    assert fetch_shard(row, gpus=1).get(timeout=T).tolist() == [1.0, 4.0]


def _stuck(t):
    import threading

    threading.Event().wait()  # the source is busy for ever: its SEND never runs
    return t


def test_a_source_proc_dying_fails_the_destination_fetch_instead_of_hanging() -> None:
    import regency.actor as ra
    from regency.testing import kill_rank

    seen = []
    before = ra.unhandled_fault_hook
    ra.unhandled_fault_hook = seen.append  # the program goes on after the proc's death
    a = this_host().spawn_procs(per_host={"gpus": 2}, name="dying")
    b = this_host().spawn_procs(per_host={"gpus": 2}, name="waiting")
    try:
        with a.activate():
            x = remote(_stuck, propagate=lambda t: t)(torch.ones(2))
        with b.activate():
            moved = x.to_mesh(b) + 1  # b's workers wait for a's, which never send
            after = torch.ones(1)
        kill_rank(a, 1)
        with pytest.raises(RemoteException, match="died before its values") as info:
            fetch_shard(moved, gpus=1).get(timeout=T)
        assert "moved = x.to_mesh(b) + 1" in str(info.value)
        assert fetch_shard(after, gpus=1).get(timeout=T).tolist() == [1.0]  # b goes on
        kill_rank(a, 0)  # the other source, stuck too: its destination is freed as well
        with pytest.raises(RemoteException, match="died before its values"):
            fetch_shard(moved, gpus=0).get(timeout=T)
    finally:
        ra.unhandled_fault_hook = before
        a.stop().get(timeout=T)
        b.stop().get(timeout=T)
