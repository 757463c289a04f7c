"""Resharding between meshes (``regency.rdma.TensorShard`` and ``reshard_into``): a tensor
held in one layout on one mesh, read in another layout by another mesh, bit-exact; replicas;
versions and in-place updates; errors."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from _reshard_actors import Owner, Reader, full_tensor

from regency.actor import this_host
from regency.rdma import (
    Block,
    BufferDroppedError,
    RDMAError,
    RDMATcpFallbackWarning,
    ShardVersionError,
    TensorShard,
    reshard_into,
)

T = 30
SHAPE = (96, 40)


@pytest.fixture(scope="module")
def meshes():
    four = this_host().spawn_procs(per_host={"gpus": 4}, name="reshard-src")
    two = this_host().spawn_procs(per_host={"gpus": 2}, name="reshard-dst")
    yield four, two
    four.stop().get(timeout=T)
    two.stop().get(timeout=T)


@pytest.fixture(scope="module")
def readers(meshes):
    return meshes[1].spawn("reader", Reader)


def check(results, splits, shape=SHAPE, seed=0, add=0.0) -> None:
    full = full_tensor(shape, seed) + np.float32(add)
    pieces = [Block.whole(shape).split(dim, r, 2) for r in range(2) for dim in splits.values()]
    for (_, (_, got)), block in zip(results.items(), pieces, strict=True):
        assert np.array_equal(got, full[block.slices])  # bit-exact


def test_four_row_blocks_to_two_column_blocks_bit_exact(meshes, readers) -> None:
    owners = meshes[0].spawn("rows", Owner, SHAPE, {"gpus": 0})
    shards = owners.publish.call().get(timeout=T)
    check(readers.pull.call(shards, SHAPE, {"gpus": 1}).get(timeout=T), {"gpus": 1})
    owners.drop.call().get(timeout=T)


def test_torch_tensors_on_both_sides(meshes, readers) -> None:
    pytest.importorskip("torch")
    owners = meshes[0].spawn("torch-rows", Owner, SHAPE, {"gpus": 0}, 0, True)
    shards = owners.publish.call().get(timeout=T)
    check(readers.pull.call(shards, SHAPE, {"gpus": 1}, as_torch=True).get(timeout=T),
          {"gpus": 1})
    check(readers.pull.call(shards, SHAPE, {"gpus": 1}).get(timeout=T), {"gpus": 1})
    owners.drop.call().get(timeout=T)


@pytest.mark.parametrize("transport", ["unix", "tcp"])
@pytest.mark.parametrize("shape", [(64, 512), (64, 4096)])
def test_over_a_data_connection(meshes, readers, transport, shape) -> None:
    """Over sockets: slabs (short rows), and many ranges in one request (long rows): the
    same bytes."""
    owners = meshes[0].spawn(f"rows-{transport}-{shape[1]}", Owner, shape, {"gpus": 0}, 5)
    shards = owners.publish.call().get(timeout=T)
    for splits in ({"gpus": 1}, {"gpus": 0}):
        check(readers.pull.call(shards, shape, splits, transport=transport).get(
            timeout=T), splits, shape=shape, seed=5)
    owners.drop.call().get(timeout=T)


def test_column_blocks_to_row_blocks_and_two_dims_of_blocks(meshes, readers) -> None:
    owners = meshes[0].spawn("cols", Owner, SHAPE, {"gpus": 1})
    shards = owners.publish.call().get(timeout=T)
    check(readers.pull.call(shards, SHAPE, {"gpus": 0}).get(timeout=T), {"gpus": 0})
    grid = meshes[0].split(gpus=("dp", "tp"), tp=2)
    blocks = grid.spawn("grid", Owner, (7, 9, 5), {"dp": 0, "tp": 2}, 3)  # uneven: 4+3, 3+2
    shards = blocks.publish.call().get(timeout=T)
    check(readers.pull.call(shards, (7, 9, 5), {"gpus": 1}).get(timeout=T), {"gpus": 1},
          shape=(7, 9, 5), seed=3)
    owners.drop.call().get(timeout=T)
    blocks.drop.call().get(timeout=T)


def test_replicas_are_read_once(meshes, readers) -> None:
    """dp=2 replicas of a tp=2 row layout: every reader gets its block whole."""
    grid = meshes[0].split(gpus=("dp", "tp"), tp=2)
    owners = grid.spawn("replicas", Owner, SHAPE, {"tp": 0})
    shards = owners.publish.call().get(timeout=T)
    assert len(list(shards.values())) == 4
    check(readers.pull.call(shards, SHAPE, {"gpus": 1}).get(timeout=T), {"gpus": 1})
    owners.drop.call().get(timeout=T)


def test_a_reader_waits_for_the_version_it_asks_for(meshes, readers) -> None:
    owners = meshes[0].spawn("versions", Owner, SHAPE, {"gpus": 0})
    shards = owners.publish.call().get(timeout=T)
    waiting = readers.pull.call(shards, SHAPE, {"gpus": 1}, 1)  # not published yet
    assert owners.step.call().get(timeout=T).values() == [1, 1, 1, 1]
    results = waiting.get(timeout=T)
    assert [v for v, _ in results.values()] == [1, 1]
    check(results, {"gpus": 1}, add=1.0)
    owners.step.call().get(timeout=T)
    text = readers.slice(gpus=0).error.call_one(shards, SHAPE, version=1).get(timeout=T)
    assert text.startswith("ShardVersionError") and "already past it" in text
    assert "version 2" in text
    with pytest.raises(ShardVersionError, match=r"\[0:24, 0:40\] of pid \d+: version 2"):
        reshard_into(shards, np.zeros(SHAPE, np.float32), Block.whole(SHAPE),
                     version=1).get(timeout=T)
    text = readers.slice(gpus=0).error.call_one(shards, SHAPE, version=5,
                                                timeout=0.5).get(timeout=T)
    assert text.startswith("TimeoutError") and "did not settle on version 5" in text
    owners.drop.call().get(timeout=T)


def test_reads_while_the_owners_update_in_place_are_never_torn(meshes, readers) -> None:
    owners = meshes[0].spawn("churn", Owner, (64, 256), {"gpus": 0})
    shards = owners.publish.call().get(timeout=T)
    churning = owners.churn.call(300)
    wrong = readers.pull_many.call(shards, (64, 256), 40).get(timeout=60)
    churning.get(timeout=60)
    assert list(wrong.values()) == [[], []]
    owners.drop.call().get(timeout=T)


def test_bad_shards_and_destinations_are_refused_at_once(meshes, readers) -> None:
    owners = meshes[0].spawn("refused", Owner, SHAPE, {"gpus": 0})
    shards = list(owners.publish.call().get(timeout=T).values())
    whole = Block.whole(SHAPE)
    with pytest.raises(ValueError, match=r"do not cover block \[0:96, 0:40\]: they hold "
                                         r"2880 of its 3840 elements"):
        reshard_into(shards[:3], np.zeros(SHAPE, np.float32), whole)
    with pytest.raises(ValueError, match="dst is float64, the shards are float32"):
        reshard_into(shards, np.zeros(SHAPE), whole)
    with pytest.raises(ValueError, match=r"dst has shape \(96, 20\), the block \(96, 40\)"):
        reshard_into(shards, np.zeros((96, 20), np.float32), whole)
    with pytest.raises(ValueError, match="does not fit"):
        reshard_into(shards, np.zeros((97, 40), np.float32), Block.whole((97, 40)))
    with pytest.raises(ValueError, match="contiguous"):
        reshard_into(shards, np.zeros((40, 96), np.float32).T, whole)
    with pytest.raises(TypeError, match="expected TensorShard values, got int"):
        reshard_into([1, 2], np.zeros(SHAPE, np.float32), whole)
    with pytest.raises(ValueError, match="no shards given"):
        reshard_into([], np.zeros(SHAPE, np.float32), whole)
    here = TensorShard(np.zeros((48, 40), np.float32), Block((24, 0), (48, 40)), SHAPE)
    with pytest.raises(ValueError, match=r"overlap without being replicas: \[24:48, 0:40\] "
                                         r"and \[24:72, 0:40\]"):
        reshard_into([*shards, here], np.zeros(SHAPE, np.float32), whole)
    here.drop()
    owners.drop.call().get(timeout=T)


def test_a_shard_checks_what_it_is_given() -> None:
    with pytest.raises(ValueError, match=r"data's shape \(4, 4\) is not the block's \(2, 4\)"):
        TensorShard(np.zeros((4, 4), np.float32), Block((0, 0), (2, 4)), (4, 4))
    with pytest.raises(ValueError, match="does not fit"):
        TensorShard(np.zeros((2, 4), np.float32), Block((3, 0), (2, 4)), (4, 4))
    with pytest.raises(ValueError, match="contiguous"):
        TensorShard(np.zeros((4, 2), np.float32).T, Block((0, 0), (2, 4)), (4, 4))
    shard = TensorShard(np.zeros((2, 4), np.float32), Block((0, 0), (2, 4)), (4, 4))
    with shard.updating(version=7):
        pass
    other = TensorShard(np.arange(8, dtype=np.float32).reshape(2, 4), Block((2, 0), (2, 4)),
                        (4, 4))
    column = np.zeros((4, 1), np.float32)  # read in this process: ranges copied here
    with pytest.raises(TimeoutError, match="did not settle on one version"):
        reshard_into([shard, other], column, Block((0, 1), (4, 1)), timeout=0.2).get()
    with other.updating(version=7):
        pass
    assert reshard_into([shard, other], column, Block((0, 1), (4, 1))).get() == 7
    assert column.ravel().tolist() == [0, 0, 1, 5]
    other.drop()
    assert shard.version == 7
    with pytest.raises(ValueError, match="version 7 is not above the current 7"), \
            shard.updating(version=7):
        pass
    shard.drop()


def test_a_dropped_or_dead_owner_fails_the_read(meshes, readers) -> None:
    owners = meshes[0].spawn("dropped", Owner, SHAPE, {"gpus": 0})
    shards = owners.publish.call().get(timeout=T)
    owners.drop.call().get(timeout=T)
    with pytest.raises(BufferDroppedError):
        reshard_into(shards, np.zeros(SHAPE, np.float32), Block.whole(SHAPE)).get(timeout=T)
    gone = this_host().spawn_procs(per_host={"gpus": 2}, name="reshard-gone")
    owners = gone.spawn("gone", Owner, SHAPE, {"gpus": 0})
    shards = owners.publish.call().get(timeout=T)
    gone.stop().get(timeout=T)
    with pytest.raises(RDMAError):
        reshard_into(shards, np.zeros(SHAPE, np.float32), Block.whole(SHAPE)).get(timeout=T)


def test_ranges_fall_back_to_a_data_connection_where_vm_is_refused(meshes, monkeypatch) -> None:
    """ptrace rules refusing process_vm_readv (simulated in this reader): the same bytes
    come over the owners' data connections, with the usual warning."""
    from regency._dataplane import _transfer

    owners = meshes[0].spawn("denied", Owner, (32, 64), {"gpus": 0}, 9)
    shards = owners.publish.call().get(timeout=T)
    monkeypatch.setenv("REGENCY_RDMA_DENY_VM", "1")
    st = _transfer._st()
    warned, st.warned = st.warned, False
    try:
        block = Block.whole((32, 64)).split(1, 1, 4)
        dst = np.zeros(block.shape, np.float32)
        with pytest.warns(RDMATcpFallbackWarning):
            reshard_into(shards, dst, block).get(timeout=T)
        assert np.array_equal(dst, full_tensor((32, 64), 9)[block.slices])
    finally:
        st.vm_denied.clear()
        st.warned = warned
    owners.drop.call().get(timeout=T)


def test_an_empty_block_holds_and_reads_nothing(meshes, readers) -> None:
    """Four ranks over three rows (as numpy.array_split): rank 3's block is empty."""
    owners = meshes[0].spawn("empty", Owner, (3, 8), {"gpus": 0}, 4)
    shards = owners.publish.call().get(timeout=T)
    assert [s.block.numel for s in shards.values()] == [8, 8, 8, 0]
    check(readers.pull.call(shards, (3, 8), {"gpus": 1}).get(timeout=T), {"gpus": 1},
          shape=(3, 8), seed=4)
    nothing = np.zeros((0, 8), np.float32)
    assert reshard_into(shards, nothing, Block((3, 0), (0, 8))).get(timeout=T) == 0
    owners.drop.call().get(timeout=T)


def test_a_call_waiting_for_a_version_holds_up_no_other(meshes) -> None:
    owners = meshes[0].spawn("waited", Owner, (16, 8), {"gpus": 0})
    other = meshes[0].spawn("unrelated", Owner, (16, 8), {"gpus": 1})
    shards, others = (m.publish.call().get(timeout=T) for m in (owners, other))
    whole = Block.whole((16, 8))
    waiting = [reshard_into(shards, np.zeros((16, 8), np.float32), whole, version=9)
               for _ in range(6)]
    assert reshard_into(others, np.zeros((16, 8), np.float32), whole).get(timeout=T) == 0
    same = np.zeros((16, 8), np.float32)
    held = reshard_into(shards, same, whole, version=9)  # the same plan as the waiting ones
    # a read of the version there is, through the plan the waiting calls share
    assert reshard_into(shards, same, whole).get(timeout=T) == 0
    assert owners.publish_version.call(9).get(timeout=T).values() == [9] * 4
    assert [f.get(timeout=T) for f in [*waiting, held]] == [9] * 7
    owners.drop.call().get(timeout=T)
    other.drop.call().get(timeout=T)


def test_a_replica_stands_in_for_a_dead_owner(meshes, monkeypatch) -> None:
    doomed = this_host().spawn_procs(per_host={"gpus": 2}, name="reshard-doomed")
    first = doomed.spawn("first", Owner, (8, 6), {"gpus": 0}, 6)
    second = meshes[1].spawn("second", Owner, (8, 6), {"gpus": 0}, 6)  # the same blocks
    doomed_shards = list(first.publish.call().get(timeout=T).values())
    live_shards = list(second.publish.call().get(timeout=T).values())
    # replicas on one host are taken by the reader's pid: put the doomed ones there
    pairs = [(d, live) if os.getpid() % 2 == 0 else (live, d)
             for d, live in zip(doomed_shards, live_shards, strict=True)]
    shards = [s for pair in zip(*pairs, strict=True) for s in pair]
    whole = Block.whole((8, 6))
    dst = np.zeros((8, 6), np.float32)
    reshard_into(shards, dst, whole).get(timeout=T)
    doomed.stop().get(timeout=T)
    from regency._dataplane import _reshard

    runs = []
    execute = _reshard._execute
    monkeypatch.setattr(_reshard, "_execute", lambda plan, *a: runs.append(
        {s.word_buffer.owner.pid for s in plan.sources}) or execute(plan, *a))
    dst[:] = 0
    reshard_into(shards, dst, whole).get(timeout=T)
    assert np.array_equal(dst, full_tensor((8, 6), 6))
    assert len(runs) == 2 and runs[0] != runs[1]  # the doomed ones failed, then the others
    second.drop.call().get(timeout=T)


def test_ranges_past_a_calls_byte_bound_are_cut(meshes, monkeypatch) -> None:
    """One process_vm_readv moves at most about 2 GiB: longer reads go in several calls
    (here with the bound lowered to 4 KiB)."""
    from regency._dataplane import _transfer

    monkeypatch.setattr(_transfer, "_GATHER_BYTES", 4096)
    owners = meshes[0].spawn("cut", Owner, (64, 100), {"gpus": 0}, 8)
    shards = owners.publish.call().get(timeout=T)
    for block in (Block.whole((64, 100)), Block.whole((64, 100)).split(1, 1, 3)):
        dst = np.zeros(block.shape, np.float32)
        reshard_into(shards, dst, block).get(timeout=T)
        assert np.array_equal(dst, full_tensor((64, 100), 8)[block.slices])
    owners.drop.call().get(timeout=T)


def test_updates_that_fail_or_nest_publish_nothing() -> None:
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    shard = TensorShard(data, Block.whole((2, 4)), (2, 4))
    with pytest.raises(ZeroDivisionError), shard.updating():
        data[0] = -1
        raise ZeroDivisionError
    assert shard.version == 0
    dst = np.zeros((2, 4), np.float32)
    with pytest.raises(TimeoutError, match="being updated, or an update failed, after "
                                           "version 0"):
        reshard_into([shard], dst, Block.whole((2, 4)), timeout=0.3).get(timeout=T)
    with shard.updating():
        data[0] = 5
        with pytest.raises(RuntimeError, match="being updated already"), shard.updating():
            pass
    assert reshard_into([shard], dst, Block.whole((2, 4))).get(timeout=T) == 1
    assert dst[0].tolist() == [5] * 4
    handle = pickle.loads(pickle.dumps(shard))
    with pytest.raises(RuntimeError, match="is a handle"), handle.updating():
        pass
    shard.drop()


def test_scalars_dtypes_and_byte_orders() -> None:
    scalar = TensorShard(np.array(3.5), Block.whole(()), ())
    out = np.zeros(())
    reshard_into([scalar], out, Block.whole(())).get(timeout=T)
    assert out.item() == 3.5
    with pytest.raises(ValueError, match="non-native byte order"):
        TensorShard(np.zeros(4, dtype=">f4"), Block.whole((4,)), (4,))
    flags = TensorShard(np.array([True, False, True]), Block.whole((3,)), (3,))
    got = np.zeros(3, dtype=bool)
    reshard_into([flags], got, Block.whole((3,))).get(timeout=T)
    assert got.tolist() == [True, False, True]
    scalar.drop()
    flags.drop()


def test_staging_kept_is_bounded(monkeypatch) -> None:
    """Plans keep their staging buffers for the next call, up to a bound in all."""
    from regency._dataplane import _reshard_plan

    monkeypatch.setattr(_reshard_plan, "_STAGING_KEPT", 3000)
    shards = [TensorShard(np.full((8, 32), i, np.float32), Block((8 * i, 0), (8, 32)),
                          (16, 32)) for i in range(2)]
    plans = []
    for part in range(2):  # a column block of row shards: each shard staged whole (2 KiB)
        block = Block.whole((16, 32)).split(1, part, 2)
        dst = np.zeros(block.shape, np.float32)
        reshard_into(shards, dst, block).get(timeout=T)
        assert dst[:, 0].tolist() == [0] * 8 + [1] * 8
        plans.append(next(reversed(_reshard_plan._plans.values())))
    assert [p.staging_bytes for p in plans] == [2048, 2048]
    assert plans[1].staging is not None and plans[0].staging is None
    for s in shards:
        s.drop()
