"""The GPU data plane: RDMABuffer over CUDA memory, CUDA tensors as arguments and results.

Marked ``cuda``; skipped without torch or without a CUDA device (CI has none). Run on a GPU
machine with ``python -m pytest -q tests/gpu``.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable

import pytest
from _cuda_actors import CudaPeer, ramp_tensor

from regency._dataplane import _cuda, _transfer
from regency._dataplane._registry import peek
from regency.actor import this_host
from regency.errors import ActorError, SupervisionError
from regency.rdma import BufferDroppedError, RDMABuffer
from regency.testing import kill_rank

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

T = 60
MiB = 1 << 20


def expected_sum(n: int, seed: int) -> int:
    return int(ramp_tensor(n, seed, "cpu").to(torch.int64).sum().item())


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll a condition that an asynchronous message makes true (bounded)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


def lends_here() -> int:
    reg = peek()
    return reg.lends() if reg is not None else 0


@pytest.fixture(scope="module")
def peers():
    procs = this_host().spawn_procs(per_host={"procs": 2}, name="cuda-peers")
    mesh = procs.spawn("peer", CudaPeer)
    yield mesh
    procs.stop().get(timeout=T)


@pytest.mark.parametrize("owner_dev", ["cuda", "cpu"])
@pytest.mark.parametrize("reader_dev", ["cuda", "cpu"])
def test_every_combination_between_two_procs(peers, owner_dev, reader_dev) -> None:
    p0, p1 = peers.slice(procs=0), peers.slice(procs=1)
    n = 3 * MiB + 5
    buf = p0.make.call_one("b", n, 3, owner_dev).get(timeout=T)
    total, transport = p1.read.call_one(buf, reader_dev).get(timeout=T)
    assert total == expected_sum(n, 3)
    assert transport == ("cuda_ipc" if owner_dev == "cuda" else "vm")
    p1.write.call_one(buf, n, 9, reader_dev).get(timeout=T)
    assert p0.checksum.call_one("b").get(timeout=T) == expected_sum(n, 9)
    p0.drop.call_one("b").get(timeout=T)


@pytest.mark.parametrize(("owner_dev", "reader_dev"),
                         [("cuda", "cuda"), ("cuda", "cpu"), ("cpu", "cuda")])
def test_staged_through_pinned_memory_over_tcp(peers, owner_dev, reader_dev) -> None:
    """The path across hosts, forced here: several pinned chunks each way."""
    p0, p1 = peers.slice(procs=0), peers.slice(procs=1)
    n = 2 * _cuda.STAGE_CHUNK + 12345
    buf = p0.make.call_one("s", n, 5, owner_dev).get(timeout=T)
    total, _ = p1.read.call_one(buf, reader_dev, "tcp").get(timeout=T)
    assert total == expected_sum(n, 5)
    p1.write.call_one(buf, n, 6, reader_dev, "tcp").get(timeout=T)
    assert p0.checksum.call_one("s").get(timeout=T) == expected_sum(n, 6)
    p0.drop.call_one("s").get(timeout=T)


def test_cpu_owner_into_cuda_through_the_host(peers) -> None:
    p0 = peers.slice(procs=0)
    n = 2 * _cuda.STAGE_CHUNK + 7
    buf = p0.make.call_one("h", n, 8, "cpu").get(timeout=T)
    dst = torch.zeros(n, dtype=torch.uint8, device="cuda")
    buf.read_into(dst).get(timeout=T)  # vm into pinned chunks, then to the device
    assert torch.equal(dst.cpu(), ramp_tensor(n, 8, "cpu"))
    p0.drop.call_one("h").get(timeout=T)


def test_controller_buffer_read_locally_and_by_a_proc(peers) -> None:
    n = 5 * MiB + 1
    t = ramp_tensor(n, 4, "cuda")
    buf = RDMABuffer(t)
    assert buf.transport_for().name == "local"
    host = torch.zeros(n, dtype=torch.uint8)
    buf.read_into(host).get(timeout=T)
    assert torch.equal(host, t.cpu())
    total, transport = peers.slice(procs=1).read.call_one(buf, "cuda").get(timeout=T)
    assert (total, transport) == (expected_sum(n, 4), "cuda_ipc")
    buf.write_from(torch.ones(n, dtype=torch.uint8, device="cuda")).get(timeout=T)
    assert int(t.sum().item()) == n
    buf.drop().get(timeout=T)


def test_a_dropped_cuda_buffer_is_an_error_not_stale_data(peers) -> None:
    p0, p1 = peers.slice(procs=0), peers.slice(procs=1)
    buf = p0.make.call_one("d", MiB, 1, "cuda").get(timeout=T)
    p0.drop.call_one("d").get(timeout=T)
    with pytest.raises(ActorError, match="BufferDroppedError") as info:
        p1.read.call_one(buf, "cuda").get(timeout=T)  # raised in the actor: ActorError
    assert "was dropped" in str(info.value)
    with pytest.raises(BufferDroppedError, match="dropped"):
        buf.read_into(torch.empty(MiB, dtype=torch.uint8, device="cuda")).get(timeout=T)


def test_a_drop_during_a_read_fails_the_read(peers, monkeypatch) -> None:
    """The owner drops the buffer after our GPU copy and before our check: an error, not
    data that was not valid."""
    p0 = peers.slice(procs=0)
    buf = p0.make.call_one("f", 4 * MiB, 1, "cuda").get(timeout=T)
    monkeypatch.setattr(_transfer, "after_device_copy",
                        lambda: p0.drop.call_one("f").get(timeout=T))
    with pytest.raises(BufferDroppedError, match="dropped during the transfer"):
        buf.read_into(torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")).get(timeout=T)


def test_lent_tensors_staged_over_tcp_reach_every_member() -> None:
    """Receivers that must use a socket (as across hosts) take lends through pinned memory."""
    os.environ["REGENCY_RDMA_TRANSPORT"] = "tcp"  # inherited by the procs spawned now
    try:
        procs = this_host().spawn_procs(per_host={"procs": 2}, name="cuda-tcp")
    finally:
        del os.environ["REGENCY_RDMA_TRANSPORT"]
    try:
        mesh = procs.spawn("peer", CudaPeer)
        t = torch.arange(3 * _cuda.STAGE_CHUNK // 8, device="cuda", dtype=torch.int64)
        got = mesh.describe.call(t).get(timeout=T)
        assert [v[4] for v in got.values()] == [int(t.sum().item())] * 2
        wait_until(lambda: lends_here() == 0, "both members took the lend over tcp")
        assert torch.equal(mesh.slice(procs=1).echo.call_one(t).get(timeout=T), t)
    finally:
        procs.stop().get(timeout=T)


def test_bad_inputs_are_refused_with_what_to_pass() -> None:
    with pytest.raises(ValueError, match="1-D"):
        RDMABuffer(torch.zeros(4, 4, device="cuda"))
    with pytest.raises(ValueError, match="contiguous"):
        RDMABuffer(torch.zeros(16, device="cuda")[::2])
    buf = RDMABuffer(torch.zeros(64, dtype=torch.uint8, device="cuda"))
    with pytest.raises(ValueError, match="contiguous"):
        buf.read_into(torch.zeros(16, 8, dtype=torch.uint8, device="cuda")[:, ::2])
    with pytest.raises(ValueError, match="cannot reach CUDA memory"):
        buf.read_into(torch.zeros(64, dtype=torch.uint8), transport="vm")
    buf.drop().get(timeout=T)


@pytest.mark.parametrize("make", [
    lambda: torch.randn(3, 5, 7, device="cuda"),
    lambda: torch.randn(3, 5, 7, device="cuda").permute(2, 0, 1),     # dense, not contiguous
    lambda: torch.arange(64, device="cuda").reshape(8, 8)[:, ::2],     # not dense
    lambda: torch.randn(1000, device="cuda", dtype=torch.bfloat16),
    lambda: torch.randn(16 * MiB, device="cuda"),                      # 64 MiB
], ids=["3d", "permuted", "strided", "bf16", "64MiB"])
def test_cuda_tensors_as_arguments_and_results(peers, make) -> None:
    t = make()
    back = peers.slice(procs=0).echo.call_one(t).get(timeout=T)
    assert back.device.type == "cuda" and back.dtype == t.dtype and back.shape == t.shape
    assert torch.equal(back, t)
    dense = t.is_contiguous() or t.dim() == 3
    if dense:
        assert back.stride() == t.stride()
    else:
        assert back.is_contiguous()
    assert back.data_ptr() != t.data_ptr()


def test_receivers_get_their_own_copy_and_lends_are_given_back(peers) -> None:
    p0 = peers.slice(procs=0)
    t = torch.zeros(1 << 16, device="cuda", requires_grad=False)
    p0.keep_and_bump.call_one(t).get(timeout=T)
    assert int(t.sum().item()) == 0  # the receiver's add_ did not reach us
    wait_until(lambda: lends_here() == 0, "the controller's lend was taken back")
    p0.echo.call_one(t).get(timeout=T)
    wait_until(lambda: p0.lends.call_one().get(timeout=T) == 0, "the proc's result lend")
    g = torch.nn.Parameter(torch.ones(8, device="cuda"))
    info = p0.describe.call_one(g).get(timeout=T)
    assert info[0].startswith("cuda") and info[4] == 8 and info[5] is True


def test_a_cast_is_taken_by_every_member(peers) -> None:
    t = torch.arange(1000, device="cuda", dtype=torch.int32)
    got = peers.describe.call(t).get(timeout=T)
    assert [v[4] for v in got.values()] == [sum(range(1000))] * 2
    wait_until(lambda: lends_here() == 0, "both members took the cast's tensor")


def test_no_gpu_memory_is_kept_after_many_echoes(peers) -> None:
    p0 = peers.slice(procs=0)
    gc.collect()  # what earlier tests left to the collector is not ours to count
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    proc_base = p0.allocated.call_one().get(timeout=T)
    for i in range(10):
        t = torch.full((4 * MiB,), i, device="cuda", dtype=torch.float32)
        assert int(p0.echo.call_one(t).get(timeout=T)[-1].item()) == i
        del t
    gc.collect()
    wait_until(lambda: lends_here() == 0, "every lend was taken")
    wait_until(lambda: p0.lends.call_one().get(timeout=T) == 0, "every result lend")
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= base
    assert p0.allocated.call_one().get(timeout=T) <= proc_base + 16 * MiB  # its kept 'kept'


def test_a_dead_owner_leaks_nothing_through_our_mapping(unhandled_failures) -> None:
    """We map a proc's CUDA buffer; the proc is killed; our mapping is closed, so the driver
    frees its memory (the device's free memory comes back)."""
    torch.cuda.synchronize()
    free_before = torch.cuda.mem_get_info()[0]
    procs = this_host().spawn_procs(per_host={"procs": 1}, name="cuda-victim")
    try:
        owner = procs.spawn("peer", CudaPeer).slice(procs=0)
        n = 512 * MiB
        buf = owner.make.call_one("big", n, 2, "cuda").get(timeout=T)
        dst = torch.empty(n, dtype=torch.uint8, device="cuda")
        buf.read_into(dst).get(timeout=T)
        owner_addr = buf.owner.address
        assert _cuda.mapping_count(owner_addr) == 1
        del dst
        torch.cuda.empty_cache()
        kill_rank(procs, 0)
        with pytest.raises(SupervisionError):
            owner.pid.call_one().get(timeout=T)
        wait_until(lambda: _cuda.mapping_count(owner_addr) == 0,
                   "our mapping of the dead proc closed")
        wait_until(lambda: torch.cuda.mem_get_info()[0] >= free_before - 64 * MiB,
                   "the dead proc's 512 MiB came back to the device")
        unhandled_failures.wait_for("SIGKILL")
    finally:
        procs.stop().get(timeout=T)


def test_a_dead_reader_leaks_nothing_here(unhandled_failures) -> None:
    """A proc maps our buffer and is killed: our memory is ours to free, and it is freed."""
    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    procs = this_host().spawn_procs(per_host={"procs": 1}, name="cuda-reader")
    try:
        reader = procs.spawn("peer", CudaPeer).slice(procs=0)
        t = ramp_tensor(256 * MiB, 1, "cuda")
        buf = RDMABuffer(t)
        total, transport = reader.read.call_one(buf, "cuda").get(timeout=T)
        assert transport == "cuda_ipc" and total == expected_sum(256 * MiB, 1)
        assert reader.mappings.call_one(buf.owner.address).get(timeout=T) == 1
        kill_rank(procs, 0)
        with pytest.raises(SupervisionError):
            reader.pid.call_one().get(timeout=T)
        buf.drop().get(timeout=T)
        del t, buf
        gc.collect()
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() <= base
        unhandled_failures.wait_for("SIGKILL")
    finally:
        procs.stop().get(timeout=T)
