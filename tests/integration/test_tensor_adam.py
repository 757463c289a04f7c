"""Adam under ``procs.activate()`` on CPU, the GPU slots the controller gives workers, and
how a worker reads the CUDA devices named in ops (checked without a GPU).

Real procs; every fetch bounded. Skips without torch.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from regency import fetch_shard  # noqa: E402
from regency._tensor._mesh import gpu_slots  # noqa: E402
from regency.actor import this_host  # noqa: E402

T = 60


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2}, name="adam")
    yield procs
    procs.stop().get(timeout=T)


def train(steps: int, **adam: object) -> torch.Tensor:
    """nn.Linear fitted by Adam from a fixed start; the final loss (plain torch code)."""
    lin = torch.nn.Linear(4, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.arange(8.0).reshape(2, 4) / 10)
        lin.bias.fill_(0.5)
    opt = torch.optim.Adam(lin.parameters(), lr=0.05, **adam)
    x = torch.arange(12.0).reshape(3, 4) / 7
    for _ in range(steps):
        opt.zero_grad()
        loss = ((lin(x) - 1) ** 2).mean()
        loss.backward()
        opt.step()
    return ((lin(x) - 1) ** 2).mean().detach()


def test_fused_adam_matches_a_single_process(procs) -> None:
    expected = train(5, fused=True)
    with procs.activate():
        loss = train(5, fused=True)
    for h in range(2):
        for g in range(2):
            got = fetch_shard(loss, hosts=h, gpus=g).get(timeout=T)
            assert torch.allclose(got, expected, rtol=0, atol=1e-6), (got, expected)
    assert torch.allclose(expected, train(5), rtol=0, atol=1e-5)  # fused is Adam


def test_plain_adam_is_refused_with_the_way_out(procs) -> None:
    with procs.activate(), pytest.raises(TypeError, match="fused=True"):
        train(1)


def test_gpu_slots_follow_the_gpus_coordinate(procs) -> None:
    assert gpu_slots(procs) == [0, 1, 0, 1]
    assert gpu_slots(procs.slice(gpus=1)) == [1, 1]  # a slice keeps its procs' slots


def test_gpu_slots_without_a_gpus_dim_count_procs_on_the_host() -> None:
    procs = this_host().spawn_procs(per_host={"procs": 3}, name="slots")
    try:
        assert gpu_slots(procs) == [0, 1, 2]
        assert gpu_slots(procs.slice(procs=slice(1, 3))) == [1, 2]
    finally:
        procs.stop().get(timeout=T)


def test_a_worker_reads_every_cuda_device_as_its_own() -> None:
    from regency._tensor._devices import Lifted
    from regency._tensor._worker import TensorWorker

    worker = TensorWorker([0, 1])
    worker.device = "its own"  # what a worker with CUDA holds: torch.device("cuda", slot)
    args = (torch.device("cuda"), [torch.device("cuda", 3), torch.device("cpu")],
            {"device": torch.device("cuda:0")})
    assert worker._resolve(args) == ("its own", ["its own", torch.device("cpu")],
                                      {"device": "its own"})
    worker.device = None  # no CUDA here: the names stay, and torch fails the op there
    assert worker._resolve(torch.device("cuda")) == torch.device("cuda")
    worker.device = torch.device("cpu")  # stands in for a GPU: Lifted moves to it
    moved = worker._resolve(Lifted(torch.arange(3.0), torch.device("cuda")))
    assert moved.device.type == "cpu" and moved.tolist() == [0.0, 1.0, 2.0]
