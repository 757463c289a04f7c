"""RDMABuffer with torch tensors (skipped without torch; CUDA skipped without a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from _rdma_actors import Holder, digest, pattern

from regency.actor import this_host
from regency.rdma import RDMABuffer

torch = pytest.importorskip("torch")

T = 30
MiB = 1 << 20


@pytest.fixture(scope="module")
def holder():
    procs = this_host().spawn_procs(per_host={"procs": 1}, name="rdma-torch")
    yield procs.spawn("holder", Holder).slice(procs=0)
    procs.stop().get(timeout=T)


@pytest.mark.parametrize("transport", [None, "tcp"])
def test_tensor_buffer_read_and_written_by_a_proc(holder, transport) -> None:
    weights = torch.randn(MiB // 4 + 3, dtype=torch.float32)
    raw = weights.view(torch.uint8)  # the Monarch idiom: register any tensor as bytes
    buf = RDMABuffer(raw)
    assert buf.size() == weights.numel() * 4
    assert "torch uint8" in repr(buf)
    assert holder.read.call_one(buf, transport).get(timeout=T) == digest(raw.numpy())
    holder.write.call_one(buf, buf.size(), 7, transport).get(timeout=T)
    assert digest(raw.numpy()) == digest(pattern(buf.size(), 7))
    buf.drop().get(timeout=T)


def test_read_into_tensor_of_any_shape(holder) -> None:
    buf = holder.make.call_one("t", "numpy", 6 * 4096, 11).get(timeout=T)
    dst = torch.zeros(6, 1024, dtype=torch.float32)  # contiguous: any shape will do
    buf.read_into(dst).get(timeout=T)
    assert digest(dst.view(torch.uint8).numpy().reshape(-1)) == digest(pattern(6 * 4096, 11))
    with pytest.raises(ValueError, match="contiguous"):
        buf.read_into(torch.zeros(1024, 12)[:, ::2])
    src = torch.arange(6 * 1024, dtype=torch.int32)
    buf.write_from(src).get(timeout=T)
    assert holder.digest.call_one("t").get(timeout=T) == digest(src.numpy())
    holder.forget.call_one("t").get(timeout=T)


def test_tensor_layout_errors() -> None:
    with pytest.raises(ValueError, match="1-D"):
        RDMABuffer(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="contiguous"):
        RDMABuffer(torch.zeros(16)[::2])
    with pytest.raises(ValueError, match="size 0"):
        RDMABuffer(torch.zeros(0))
    assert RDMABuffer(torch.zeros(16)[4:]).size() == 48  # 1-D slices are fine


def test_numpy_interop(holder) -> None:
    buf = RDMABuffer(np.arange(1000, dtype=np.int64))
    t = torch.empty(1000, dtype=torch.int64)
    buf.read_into(t).get(timeout=T)
    assert t.tolist() == list(range(1000))
    buf.drop().get(timeout=T)
