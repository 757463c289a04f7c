"""The tensor engine (issue 13): torch ops under ``procs.activate()`` run on every rank.

Real procs, real workers; every fetch is bounded. Skips without torch.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import regency  # noqa: E402
import regency.actor as ra  # noqa: E402
from regency import (  # noqa: E402
    RemoteException,
    Tensor,
    fetch_shard,
    get_active_mesh,
    no_mesh,
    reduce,
    reduce_,
    remote,
)
from regency.actor import SupervisionError, this_host  # noqa: E402
from regency.config import configured  # noqa: E402

T = 60


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2}, name="te")
    with procs.activate():
        warm = torch.zeros(1)
    fetch_shard(warm).get(timeout=T)
    yield procs
    procs.stop().get(timeout=T)


def _double(t):
    return t * 2


def fetch(t, **coords):
    return fetch_shard(t, **coords).get(timeout=T)


def test_ops_and_factories_run_on_every_rank(procs) -> None:
    with procs.activate():
        x = torch.ones(3, 4)  # a factory: remote too
        y = x * 2 + procs.rank_tensor(("hosts", "gpus"))
        assert isinstance(y, Tensor) and y.shape == (3, 4) and y.dtype == torch.float32
        assert "regency.Tensor" in repr(y)  # never fetches
        s = y.sum()
    for h in range(2):
        for g in range(2):
            assert fetch(s, hosts=h, gpus=g).item() == 12 * (2 + 2 * h + g)


def test_rank_tensors_and_dims(procs) -> None:
    ranks = procs.rank_tensors()
    assert set(ranks) == {"hosts", "gpus"}
    with procs.activate():
        assert get_active_mesh() is ranks["gpus"].mesh
    assert fetch(ranks["hosts"], hosts=1, gpus=0).item() == 1
    assert fetch(ranks["gpus"], hosts=1, gpus=0).item() == 0


def test_no_mesh_runs_locally(procs) -> None:
    with procs.activate():
        remote_t = torch.zeros(2)
        with no_mesh.activate():
            local = torch.ones(2) + 1
        assert isinstance(remote_t, Tensor)
    assert not isinstance(local, Tensor) and local.tolist() == [2.0, 2.0]


def test_activate_without_with_activates_at_once_until_deactivate(procs) -> None:
    """As Monarch's: ``activate()`` makes the mesh active when called; ``with`` (or the
    mesh's ``deactivate()``) ends it."""
    guard = procs.activate()
    try:
        mesh = get_active_mesh()
        x = torch.ones(2) * 3
        assert isinstance(x, Tensor)
    finally:
        mesh.deactivate()
    with pytest.raises(ValueError, match="no device mesh is active"):
        get_active_mesh()
    assert not isinstance(torch.ones(1), Tensor)
    guard.__exit__(None, None, None)  # already ended: nothing more happens
    assert fetch(x, hosts=1, gpus=1).tolist() == [3.0, 3.0]
    with no_mesh.activate(), procs.activate():  # nested: the innermost wins, then unwinds
        assert isinstance(torch.ones(1), Tensor)
    assert not isinstance(torch.ones(1), Tensor)


def test_the_active_mesh_has_monarchs_device_mesh_surface(procs) -> None:
    with procs.activate():
        m = get_active_mesh()
        assert m.names == ("hosts", "gpus") and m.size() == 4 and m.size("gpus") == 2
        assert m.size(("hosts", "gpus")) == 4 and list(m.extent.labels) == ["hosts", "gpus"]
        ranks = m.rank("gpus") * 10
        group = m.process_group(("gpus",))
        assert group.dims == ("gpus",)
        with pytest.raises(ValueError, match="'zz' is not a dimension"):
            m.size("zz")
    assert [fetch(ranks, hosts=1, gpus=g).item() for g in range(2)] == [0, 10]
    sub, flat = m(hosts=1), m.flatten("all")
    assert sub.names == ("gpus",) and m.slice(hosts=1) is sub
    assert flat.names == ("all",) and flat.size() == 4 and flat is not m
    with flat.activate():
        r = flat.rank("all") + 100
    assert [fetch(r, all=i).item() for i in range(4)] == [100, 101, 102, 103]


def test_fetch_needs_every_dim(procs) -> None:
    with procs.activate():
        x = torch.zeros(1)
    with pytest.raises(ValueError, match="missing \\['gpus'\\]"):
        fetch_shard(x, hosts=0)
    with pytest.raises(KeyError, match="unknown \\['zz'\\]") as unknown:  # Monarch's type
        fetch_shard(x, hosts=0, gpus=0, zz=1)
    assert isinstance(unknown.value, ValueError)  # and regency's earlier one
    with pytest.raises(KeyError, match="not dims of the mesh"):
        reduce(x, "zz")
    assert fetch(x).tolist() == [0.0]  # no coordinates: the first rank


def test_in_place_through_views(procs) -> None:
    with procs.activate():
        x = torch.zeros(4)
        v = x[1:3]
        v.add_(5)
        x.mul_(2)
    assert fetch(x, hosts=0, gpus=1).tolist() == [0.0, 10.0, 10.0, 0.0]


def test_linear_forward_backward_sgd_matches_local(procs) -> None:
    def step(lin: torch.nn.Linear, x: torch.Tensor) -> None:
        with torch.no_grad():
            lin.weight.copy_(torch.arange(8.0).reshape(2, 4) / 10)
            lin.bias.fill_(0.5)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        loss = lin(x).pow(2).sum()
        loss.backward()
        opt.step()

    local = torch.nn.Linear(4, 2)
    step(local, torch.ones(8, 4))
    with procs.activate():
        lin = torch.nn.Linear(4, 2)
        step(lin, torch.ones(8, 4))
        w = lin.weight
    assert torch.allclose(fetch(w, hosts=1, gpus=1), local.weight.detach())


def test_local_tensor_is_refused_naming_the_argument(procs) -> None:
    with no_mesh.activate():
        local = torch.ones(2)
    with procs.activate():
        x = torch.ones(2)
        with pytest.raises(TypeError, match="argument 'other' \\(args\\[1\\]\\): LOCAL_TENSOR"):
            x + local


def test_wrong_mesh_and_dropped_are_refused(procs) -> None:
    other = this_host().spawn_procs(per_host={"gpus": 1}, name="te-other")
    try:
        with other.activate():
            elsewhere = torch.ones(2)
        with procs.activate():
            x = torch.ones(2)
            with pytest.raises(TypeError, match="WRONG_MESH"):
                x + elsewhere
            x.drop()
            with pytest.raises(TypeError, match="argument 'self' \\(args\\[0\\]\\): DROPPED"):
                x * 2
        with pytest.raises(TypeError, match="LOCAL_TENSOR"):  # outside: on its own mesh
            torch.ones(1) + elsewhere
        with no_mesh.activate(), pytest.raises(TypeError, match="NO_MESH"):
            elsewhere + 1
    finally:
        other.stop().get(timeout=T)


def test_ops_outside_activate_run_on_their_tensors_mesh(procs) -> None:
    """As Monarch's: a remote tensor carries its mesh; ops on it outside every
    ``activate()`` run there (sent with the mesh's next flush, here the fetch)."""
    with procs.activate():
        z = torch.arange(4.0)
    doubled = remote(_double, propagate=lambda t: t)
    y = (z + 1).sum()
    w = doubled(z)
    assert isinstance(y, Tensor) and y.mesh is z.mesh
    assert fetch(y, hosts=1, gpus=0).item() == 10.0
    assert fetch(w, hosts=0, gpus=1).tolist() == [0.0, 2.0, 4.0, 6.0]
    with pytest.raises(ValueError, match="no device mesh is active"):
        doubled(torch.ones(1))  # no remote tensor: no mesh to run on


def test_data_dependent_ops_are_refused(procs) -> None:
    with procs.activate():
        x = torch.ones(3)
        with pytest.raises(TypeError, match=r"depends on the data.*fetch_shard"):
            x.sum().item()
        with pytest.raises(TypeError, match=r"nonzero.*depends on the data"):
            torch.nonzero(x)


def _boom(t: torch.Tensor) -> torch.Tensor:
    raise ValueError("boom on purpose")


def test_remote_error_reaches_dependents_only(procs) -> None:
    with procs.activate():
        x = torch.ones(2)
        bad = remote(_boom, propagate=lambda t: t)(x)
        dependent = (bad + 1).sum()
        independent = x + 3
    with pytest.raises(RemoteException) as info:
        fetch(dependent, hosts=0, gpus=1)
    text = str(info.value)
    assert "boom on purpose" in text and "test_tensor_engine.py" in text
    assert "bad = remote(_boom" in info.value.controller_frames
    assert info.value.rank == 1
    assert fetch(independent, hosts=1, gpus=1).tolist() == [4.0, 4.0]


def test_remote_with_cached_propagation(procs) -> None:
    double_and_sum = remote(lambda t: (t * 2, t.sum()))
    with procs.activate():
        x = torch.ones(3) + procs.rank_tensor("gpus")
        d, s = double_and_sum(x)
        _d2, s2 = double_and_sum(x)  # the cached structure: no second probe
        assert d.shape == (3,) and s.shape == ()
    assert fetch(s2, hosts=0, gpus=1).item() == 6.0
    assert fetch(d, hosts=0, gpus=1).tolist() == [4.0, 4.0, 4.0]


@pytest.mark.parametrize("reduction,dims,scatter,at,expected", [
    ("sum", "gpus", False, {"hosts": 1, "gpus": 0}, [5.0, 7.0]),
    ("sum", (), False, {"hosts": 1, "gpus": 0}, [6.0, 10.0]),
    ("avg", "hosts", False, {"hosts": 0, "gpus": 1}, [2.0, 3.0]),
    ("product", "gpus", False, {"hosts": 1, "gpus": 1}, [6.0, 12.0]),
    ("min", "hosts", False, {"hosts": 1, "gpus": 1}, [1.0, 2.0]),
    ("max", "gpus", False, {"hosts": 0, "gpus": 0}, [1.0, 2.0]),
    ("stack", "gpus", False, {"hosts": 1, "gpus": 1}, [[2.0, 3.0], [3.0, 4.0]]),
    ("sum", "gpus", True, {"hosts": 1, "gpus": 1}, 7.0),
    ("stack", "gpus", True, {"hosts": 1, "gpus": 1}, [3.0, 4.0]),
])
def test_reduce_over_mesh_dims_on_cpu(procs, reduction, dims, scatter, at, expected) -> None:
    with procs.activate():
        v = torch.arange(2.0) + procs.rank_tensor(("hosts", "gpus"))  # [r, r + 1]
        out = reduce(v, dims, reduction, scatter=scatter)
    assert fetch(out, **at).tolist() == expected


def test_reduce_in_place_and_bad_arguments(procs) -> None:
    with procs.activate():
        v = procs.rank_tensor(("hosts", "gpus")).float()
        reduce_(v, "gpus", "max")
        with pytest.raises(ValueError, match="not dims of the mesh"):
            reduce(v, "nodes")
        with pytest.raises(ValueError, match="dim 0 must be 2"):
            reduce(torch.ones(3), "gpus", scatter=True)
    assert fetch(v, hosts=1, gpus=0).item() == 3.0


def _all_sum(t: torch.Tensor, group: object) -> torch.Tensor:
    import torch.distributed as dist

    t = t.clone()
    dist.all_reduce(t, group=group)
    return t


def test_process_group_in_remote_function(procs) -> None:
    group = procs.process_group("hosts")
    with procs.activate():
        r = procs.rank_tensor(("hosts", "gpus")).float()
        out = remote(_all_sum, propagate=lambda t, g: t)(r, group)
    assert fetch(out, hosts=0, gpus=1).item() == 4.0  # 1 + 3


def test_process_group_made_before_any_op_knows_every_rank() -> None:
    # rank 0's first message is then comms_rendezvous, sent to a slice of one worker: the
    # worker must still take its rank, coordinates and world from its own mesh
    fresh = this_host().spawn_procs(per_host={"gpus": 2}, name="te-group-first")
    try:
        with configured(collective_timeout=30.0):
            group = fresh.process_group("gpus")
        with fresh.activate():
            r = fresh.rank_tensor("gpus").float()
            out = remote(_all_sum, propagate=lambda t, g: t)(r, group)
            total = reduce(r, "gpus")
        for g in range(2):
            assert fetch(out, gpus=g).item() == 1.0  # 0 + 1
            assert fetch(total, gpus=g).item() == 1.0
            assert fetch(r, gpus=g).item() == g
    finally:
        fresh.stop().get(timeout=T)


def test_dropped_tensors_free_worker_memory(procs) -> None:
    from regency._tensor.api import device_mesh_of

    mesh = device_mesh_of(procs)
    before = mesh.table_sizes()
    with procs.activate():
        x = torch.zeros(1)
        for _ in range(200):
            x = x + 1
    after = mesh.table_sizes()
    assert fetch(x).item() == 200.0
    assert max(after) - max(before) <= 2, (before, after)


def _exit_on_rank_one(t: torch.Tensor) -> torch.Tensor:
    import os

    if int(t) == 1:
        os._exit(3)
    return t


def test_proc_death_fails_the_fetch_instead_of_hanging(monkeypatch) -> None:
    monkeypatch.setattr(ra, "unhandled_fault_hook", lambda failure: None)
    doomed = this_host().spawn_procs(per_host={"gpus": 2}, name="te-doomed")
    try:
        with doomed.activate():
            r = doomed.rank_tensor("gpus")
            y = remote(_exit_on_rank_one, propagate=lambda t: t)(r)
        assert fetch(r, gpus=0).item() == 0
        with pytest.raises(SupervisionError, match="exited with code 3"):
            fetch(y, gpus=1)
    finally:
        doomed.stop().get(timeout=T)


def test_streams_keep_their_tensors(procs) -> None:
    from regency import Stream, get_active_stream

    side = Stream("side")
    with procs.activate():
        x = torch.ones(2)
        with side.activate():
            assert get_active_stream() is side
            y = torch.zeros(2)
            with pytest.raises(TypeError, match="argument 'self' \\(args\\[0\\]\\): WRONG_STREAM"):
                x + 1
            y.add_(3)
        assert y.stream is side and x.stream.name == "main"
    assert fetch(y).tolist() == [3.0, 3.0]


def test_coalescing_sends_the_block_at_its_end(procs) -> None:
    from regency import coalescing

    with procs.activate(), coalescing():
        x = torch.zeros(1)
        for _ in range(600):  # more than a batch: still held until the block ends
            x = x + 1
        with pytest.raises(RuntimeError, match="inside coalescing"):
            fetch_shard(x)
    assert fetch(x, hosts=1, gpus=1).item() == 600.0


def test_scalar_types_promote_as_torch_does(procs) -> None:
    with procs.activate():
        i = torch.ones(2, dtype=torch.int64)
        a = i + 1  # cached for (int64 tensor, int)
        b = i + 1.0  # must not reuse it: float
        c = i + True
    assert (a.dtype, b.dtype, c.dtype) == (torch.int64, torch.float32, torch.int64)
    assert fetch(b).tolist() == [2.0, 2.0]


def _plus_rank(t: torch.Tensor, r: torch.Tensor) -> float:
    return float((t + r).sum())


def test_remote_call_gives_a_value_mesh(procs) -> None:
    f = remote(_plus_rank, propagate="inspect")
    with procs.activate():
        x = torch.ones(2)
        values = f.call(x, procs.rank_tensor(("hosts", "gpus")))
        with pytest.raises(TypeError, match="propagate='inspect'"):
            f(x, x)
    mesh = values.get(timeout=T)
    assert [v for _, v in mesh.items()] == [2.0, 4.0, 6.0, 8.0]
    assert mesh.item(hosts=1, gpus=0) == 6.0


def test_index_with_a_rank_tensor(procs) -> None:
    with procs.activate():
        x = torch.arange(16.0).reshape(4, 4)
        r = procs.rank_tensor(("hosts", "gpus"))
        row = x[r]  # torch would call .item() on r: here it is index_select on dim 0
        col = x[1:, r]
        w = torch.ones(4, 3, requires_grad=True)
        w[r].sum().backward()  # differentiable, like index_select
        g = w.grad
        with pytest.raises(TypeError, match="index item Ellipsis is not supported"):
            x[..., r]
        y = x[2]  # plain ints index as torch does
    assert row.shape == (4,) and col.shape == (3,)
    assert fetch(row, hosts=1, gpus=0).tolist() == [8.0, 9.0, 10.0, 11.0]
    assert fetch(col, hosts=0, gpus=1).tolist() == [5.0, 9.0, 13.0]
    assert fetch(g, hosts=1, gpus=1).tolist() == [[0.0] * 3] * 3 + [[1.0] * 3]
    assert fetch(y).tolist() == [8.0, 9.0, 10.0, 11.0]


def test_slice_mesh_and_to_mesh_between_meshes(procs) -> None:
    other = this_host().spawn_procs(per_host={"gpus": 2}, name="te-stage")
    try:
        with procs.activate():
            x = torch.ones(2, 3) * procs.rank_tensor(("hosts", "gpus"))
            s = x.slice_mesh(hosts=1)  # the procs with hosts=1: a mesh of dim gpus
            assert regency.to_mesh(x, procs) is x  # already there
            with pytest.raises(ValueError, match=r"dims \['hosts'\] are missing there"):
                regency.to_mesh(x, other)
        assert s.mesh.labels == ("gpus",) and s.shape == (2, 3)
        assert [fetch(s, gpus=g)[0, 0].item() for g in range(2)] == [2.0, 3.0]
        with other.activate():
            y = (s.to_mesh(other) + 1).t()  # the next stage computes on it
        assert fetch(y, gpus=1).tolist() == [[4.0, 4.0]] * 3
        with pytest.warns(UserWarning, match=r"dims \['hosts'\] are not in the source"):
            back = regency.to_mesh({"y": y, "n": 7}, procs)  # copied along hosts
        assert back["n"] == 7 and back["y"].mesh is get_mesh(procs)
        assert fetch(back["y"], hosts=0, gpus=1).tolist() == [[4.0, 4.0]] * 3
        assert fetch(back["y"], hosts=1, gpus=0).tolist() == [[3.0, 3.0]] * 3
        with pytest.raises(ValueError, match="give an int coordinate"):
            regency.slice_mesh(x, cpus=0)
        with procs.activate():
            bad = remote(_boom, propagate=lambda t: t)(x)
        moved = bad.slice_mesh(hosts=0)  # worker to worker: the error travels with it
        with pytest.raises(RemoteException, match="boom on purpose"):
            fetch(moved, gpus=1)
    finally:
        other.stop().get(timeout=T)


def get_mesh(procs):
    return regency._tensor.api.device_mesh_of(procs)


def test_reduce_on_a_slice_of_a_mesh_with_comms_fails_instead_of_lying(procs) -> None:
    with procs.activate():
        x = torch.ones(2) * procs.rank_tensor(("hosts", "gpus"))
        whole = reduce(x, "gpus")  # the procs join the parent mesh's gloo world
        s = x.slice_mesh(hosts=1)
    with s.mesh.activate():
        part = reduce(s, "gpus")  # its ranks are not the world's: refused on the worker
    assert fetch(whole, hosts=1, gpus=0).tolist() == [5.0, 5.0]
    with pytest.raises(RemoteException, match="already belongs to the gloo world"):
        fetch(part, gpus=0)
