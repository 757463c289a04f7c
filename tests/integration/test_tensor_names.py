"""Monarch's smaller tensor-engine names: OpaqueRef, RemoteProcessGroup, function_resolvers,
Future.add_callback, Instance.spawn_tensor_engine, ProcMesh.to_table, and the names with no
meaning here (Simulator, world_mesh), which say what to use instead."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

import regency  # noqa: E402
from regency import OpaqueRef, fetch_shard, remote  # noqa: E402
from regency.actor import context, this_host  # noqa: E402

T = 60


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="names")
    yield procs
    procs.stop().get(timeout=T)


def _make_counter(start):
    return OpaqueRef({"n": int(start)})


def _bump(ref, by):
    ref.value["n"] += int(by)
    return torch.tensor(float(ref.value["n"]))


def _group_size(t, group):
    import torch.distributed as dist

    return torch.tensor(float(dist.get_world_size(group))) + t


def test_opaque_ref_keeps_an_object_on_the_workers(procs) -> None:
    with procs.activate():
        start = procs.rank_tensor("gpus") * 10
        ref = remote(_make_counter, propagate=lambda s: OpaqueRef(None))(start)
        assert isinstance(ref, OpaqueRef)
        bump = remote(_bump, propagate=lambda r, b: torch.tensor(0.0))
        bump(ref, 1)
        last = bump(ref, 2)
    assert fetch_shard(last, gpus=0).get(timeout=T).item() == 3.0
    assert fetch_shard(last, gpus=1).get(timeout=T).item() == 13.0
    with pytest.raises(RuntimeError, match="inside a remote"):
        ref.value  # noqa: B018 - the controller cannot read it


def test_process_group_is_a_remote_process_group(procs) -> None:
    with procs.activate():
        group = procs.process_group("gpus")
        assert isinstance(group, regency.RemoteProcessGroup)
        assert group.size() == 2 and not group.dropped
        group.ensure_split_comm_remotely(None)
        out = remote(_group_size, propagate=lambda t, g: t)(torch.zeros(()), group)
    assert fetch_shard(out, gpus=1).get(timeout=T).item() == 2.0
    group.drop()
    assert group.dropped


def test_function_resolvers_name_functions_for_the_workers(procs) -> None:
    asked = []

    def by_name(fn):
        asked.append(fn)
        return "torch.neg" if fn is _negate_by_value else None

    regency.function_resolvers.append(by_name)
    try:
        with procs.activate():
            out = remote(_negate_by_value, propagate=lambda t: t)(torch.ones(2))
    finally:
        regency.function_resolvers.remove(by_name)
    assert asked == [_negate_by_value]
    assert fetch_shard(out, gpus=0).get(timeout=T).tolist() == [-1.0, -1.0]


def _negate_by_value(t):
    raise AssertionError("the resolver named torch.neg: this body never runs")


def test_future_add_callback_runs_once_done(procs) -> None:
    with procs.activate():
        x = torch.ones(1)
    fut = fetch_shard(x, gpus=0)
    seen = []
    done = threading.Event()
    fut.add_callback(lambda f: (seen.append(f.get().item()), done.set()))
    assert done.wait(T)
    fut.add_callback(lambda f: seen.append("again"))  # already done: at once
    assert seen == [1.0, "again"]


def test_spawn_tensor_engine_and_to_table(procs) -> None:
    engine = context().actor_instance.spawn_tensor_engine(procs)
    assert engine is regency._tensor.api.device_mesh_of(procs)
    table = procs.to_table()
    assert "gpus" in table and "| rank |" in table.replace("  ", " ")


def test_names_without_meaning_here_say_what_to_use() -> None:
    with pytest.raises(NotImplementedError, match="spawn_procs"):
        regency.Simulator()
    with pytest.raises(NotImplementedError, match="spawn_procs"):
        regency.world_mesh(None, [], 2)
    with regency.set_meta("phase"):  # accepted; tags nothing
        pass
