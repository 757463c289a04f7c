"""The tensor engine on CUDA: ops, fetch, reduce, to_mesh and training on each rank's GPU.

Marked ``cuda``; skipped without torch or without a CUDA device (CI has none). Run on a GPU
machine with ``PYTHONPATH=src:tests/gpu python3 -m pytest -q tests/gpu``. With one GPU both
ranks of a 2-rank mesh share ``cuda:0`` (collectives then go through gloo, staged on CPU);
a 1-rank mesh gets NCCL.
"""

from __future__ import annotations

import pytest
from _tensor_cuda_fns import all_sum, bad_matmul, current_device, device_of, nccl_groups

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

from regency import RemoteException, fetch_shard, reduce, reduce_, remote  # noqa: E402
from regency.actor import this_host  # noqa: E402

T = 120


@pytest.fixture(scope="module")
def procs():
    """Two ranks along ``gpus``: rank g uses cuda:(g mod device count)."""
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="te-cuda")
    yield procs
    procs.stop().get(timeout=T)


def fetch(t, **coords):
    return fetch_shard(t, **coords).get(timeout=T)


def expected_device(g: int) -> str:
    return f"cuda:{g % torch.cuda.device_count()}"


def devices(procs, t) -> list[str]:
    """The device of ``t`` on each rank, in rank order."""
    with procs.activate():
        got = remote(device_of, propagate="inspect").call(t)
    return list(got.get(timeout=T).values())


def test_ops_run_on_the_gpu_of_each_rank(procs) -> None:
    with procs.activate():
        x = torch.ones(3, 4, device="cuda")
        r = procs.rank_tensor("gpus").to("cuda")
        y = (x * 2 + r).sum()
        lifted = torch.tensor([1.0, 2.0], device="cuda")  # made here, moved to each rank
        doubled = remote(lambda t: t * 2)(lifted)  # outputs learnt from the first rank
    assert x.is_cuda and y.is_cuda and doubled.is_cuda  # the controller's view
    assert devices(procs, y) == [expected_device(0), expected_device(1)]
    assert devices(procs, lifted) == [expected_device(0), expected_device(1)]
    for g in range(2):
        value = fetch(y, gpus=g)
        assert value.device.type == "cpu"  # fetched values come back in CPU memory
        assert value.item() == 12 * (2 + g)
        assert fetch(doubled, gpus=g).tolist() == [2.0, 4.0]


def test_each_worker_thread_is_on_its_device(procs) -> None:
    with procs.activate():
        got = remote(current_device, propagate="inspect").call()
    assert list(got.get(timeout=T).values()) == [expected_device(0), expected_device(1)]


def test_a_default_device_applies_on_every_rank(procs) -> None:
    with procs.activate(), torch.device("cuda"):
        z = torch.zeros(5) + 1
    assert z.is_cuda
    assert devices(procs, z) == [expected_device(0), expected_device(1)]
    assert fetch(z, gpus=1).tolist() == [1.0] * 5


def test_reductions_of_cuda_tensors(procs) -> None:
    with procs.activate():
        r = procs.rank_tensor("gpus").to("cuda", torch.float32)
        v = torch.arange(2.0, device="cuda") + r * 10  # rank 0: [0, 1]; rank 1: [10, 11]
        s = reduce(v, "gpus", "sum")
        a = reduce(v, "gpus", "avg")
        st = reduce(v, "gpus", "stack")
        sc = reduce(v, "gpus", "sum", scatter=True)
        m = v.clone()
        reduce_(m, "gpus", "max")
    assert s.is_cuda and st.is_cuda
    for g in range(2):
        assert fetch(s, gpus=g).tolist() == [10.0, 12.0]
        assert fetch(a, gpus=g).tolist() == [5.0, 6.0]
        assert fetch(st, gpus=g).tolist() == [[0.0, 1.0], [10.0, 11.0]]
        assert fetch(m, gpus=g).tolist() == [10.0, 11.0]
    assert fetch(sc, gpus=0).item() == 10.0
    assert fetch(sc, gpus=1).item() == 12.0
    assert devices(procs, s) == [expected_device(0), expected_device(1)]
    with procs.activate():
        used = remote(nccl_groups, propagate="inspect").call()
    shared = torch.cuda.device_count() < 2  # both ranks on cuda:0: NCCL refuses, gloo serves
    assert all((n == 0) == shared for n in used.get(timeout=T).values())


def test_process_group_takes_cuda_tensors_in_remote_functions(procs) -> None:
    with procs.activate():
        v = torch.ones(4, device="cuda") * (procs.rank_tensor("gpus").to("cuda") + 1)
        out = remote(all_sum, propagate=lambda t, g: torch.empty_like(t))(
            v, procs.process_group("gpus"))
    for g in range(2):
        assert fetch(out, gpus=g).tolist() == [3.0] * 4


def test_a_one_rank_mesh_reduces_with_nccl() -> None:
    one = this_host().spawn_procs(per_host={"gpus": 1}, name="te-nccl")
    try:
        with one.activate():
            v = torch.full((3,), 2.0, device="cuda")
            s = reduce(v, "gpus", "sum")
            st = reduce(v, "gpus", "stack")
        assert fetch(s).tolist() == [2.0] * 3
        assert fetch(st).tolist() == [[2.0] * 3]
        with one.activate():
            assert remote(nccl_groups, propagate="inspect").call_one().get(timeout=T) == 1
    finally:
        one.stop().get(timeout=T)


def test_to_mesh_and_slice_mesh_keep_tensors_on_the_gpu(procs) -> None:
    other = this_host().spawn_procs(per_host={"gpus": 2}, name="te-cuda-2")
    try:
        with procs.activate():
            h = torch.ones(2, 3, device="cuda") * (procs.rank_tensor("gpus").to("cuda") + 1)
        moved = h.to_mesh(other)
        with other.activate():
            out = moved.sum()
        assert moved.is_cuda
        assert devices(other, moved) == [expected_device(0), expected_device(1)]
        for g in range(2):
            assert fetch(out, gpus=g).item() == 6.0 * (g + 1)
        one = h.slice_mesh(gpus=1)
        assert one.is_cuda
        assert fetch(one).tolist() == [[2.0] * 3] * 2
        with procs.slice(gpus=1).activate():
            where = remote(device_of, propagate="inspect").call(one)
        assert list(where.get(timeout=T).values()) == [expected_device(1)]
    finally:
        other.stop().get(timeout=T)


def fit(steps: int, make_opt) -> torch.Tensor:
    """nn.Linear on CUDA from a fixed start; the final loss (plain torch code)."""
    lin = torch.nn.Linear(4, 2, device="cuda")
    with torch.no_grad():
        lin.weight.copy_(torch.arange(8.0, device="cuda").reshape(2, 4) / 10)
        lin.bias.fill_(0.5)
    opt = make_opt(lin.parameters())
    x = torch.arange(12.0, device="cuda").reshape(3, 4) / 7
    for _ in range(steps):
        opt.zero_grad()
        loss = ((lin(x) - 1) ** 2).mean()
        loss.backward()
        opt.step()
    return ((lin(x) - 1) ** 2).mean().detach()


@pytest.mark.parametrize("name", ["sgd", "adam_fused", "adam_capturable"])
def test_training_on_cuda_matches_a_local_run(procs, name) -> None:
    make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1),
            "adam_fused": lambda p: torch.optim.Adam(p, lr=0.05, fused=True),
            "adam_capturable": lambda p: torch.optim.Adam(p, lr=0.05, capturable=True)}[name]
    expected = fit(5, make).cpu()  # on this process's GPU, no mesh
    with procs.activate():
        loss = fit(5, make)
    assert loss.is_cuda
    for g in range(2):
        got = fetch(loss, gpus=g)
        assert torch.allclose(got, expected, rtol=0, atol=1e-5), (name, got, expected)


def test_an_error_in_a_cuda_op_is_a_remote_exception(procs) -> None:
    with procs.activate():
        t = torch.ones(2, 3, device="cuda")
        bad = remote(bad_matmul, propagate=lambda t: t)(t)  # (2,3) @ (2,3) fails there
        after = bad + 1  # depends on the failure
        fine = t.sum()  # does not
    with pytest.raises(RemoteException, match=r"bad_matmul|shapes"):
        fetch(bad, gpus=1)
    with pytest.raises(RemoteException):
        fetch(after)
    assert fetch(fine, gpus=1).item() == 6.0
    with procs.activate():
        again = (torch.ones(2, device="cuda") * 3).sum()  # the GPU still works
    assert fetch(again, gpus=1).item() == 6.0
