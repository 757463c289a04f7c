"""Resharding with CUDA memory (``regency.rdma.reshard_into``): shards on the GPU read into
GPU and CPU blocks, CPU shards into GPU blocks, updates queued on the GPU published whole.

Marked ``cuda``; skipped without a CUDA device. With one GPU every proc uses ``cuda:0``.
"""

from __future__ import annotations

import pytest
from _cuda_actors import ShardHolder

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

from regency.actor import this_host  # noqa: E402

T = 120


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"gpus": 4}, name="reshard-cuda")
    yield procs
    procs.stop().get(timeout=T)


@pytest.mark.parametrize(("owner_dev", "reader_dev"),
                         [("cuda", "cuda"), ("cuda", "cpu"), ("cpu", "cuda")])
def test_row_blocks_to_column_blocks_with_device_memory(procs, owner_dev, reader_dev) -> None:
    holders = procs.spawn(f"rows-{owner_dev}-{reader_dev}", ShardHolder, owner_dev)
    shards = holders.publish.call().get(timeout=T)
    for index in range(2):
        reader = holders.slice(gpus=3 - index)
        assert reader.pull.call_one(shards, index, 2, reader_dev).get(timeout=T) == (0, 0.0)
    holders.bump.call().get(timeout=T)
    reader = holders.slice(gpus=1)
    assert reader.pull.call_one(shards, 1, 3, reader_dev).get(timeout=T) == (1, 0.0)
