"""The names issue 18 added to match Monarch, where no process is needed."""

from __future__ import annotations

import asyncio
import pickle
import threading

import pytest

import regency
from regency.actor import Actor, Extent, Point, ProcId, ProcMesh, Uid, ValueMesh, returns_future
from regency.actor import attach as attach_client
from regency.rdma import RDMAAction


def test_uid_syntax_matches_monarch() -> None:
    # values and texts taken from Monarch 0.7.0 (Uid.instance_from_value(v, "a"))
    assert str(Uid.instance_from_value(0, "a")) == "a<1>"
    assert str(Uid.instance_from_value(9, "a")) == "a<a>"
    assert str(Uid.instance_from_value(58, "a")) == "a<21>"
    assert str(Uid.instance_from_value(12345, "a")) == "a<4ER>"
    assert str(Uid.instance_from_value(2**64 - 1, "a")) == "a<JPwcyDCgEup>"
    assert str(Uid.instance_from_value(5)) == "<6>"
    single = Uid.from_string("foo_bar")
    assert single.is_singleton and not single.is_instance and single.label == "foo_bar"
    fresh = Uid.instance("trainer")
    again = Uid.from_string(str(fresh))
    assert again == fresh and hash(again) == hash(fresh) and again.is_instance
    assert again.instance_value == fresh.instance_value
    assert Uid.anonymous().label is None
    assert pickle.loads(pickle.dumps(fresh)) == fresh
    with pytest.raises(ValueError, match="label"):
        Uid.from_string("Abc")
    with pytest.raises(ValueError, match="base58"):
        Uid.from_string("x<0>")
    with pytest.raises(TypeError, match=r"Uid\.instance"):
        Uid()


def test_proc_id() -> None:
    uid = Uid.instance("worker")
    proc = ProcId(uid)
    assert str(proc) == str(uid) and proc.uid == uid and proc.label == "worker"
    assert ProcId.from_string(str(proc)) == proc
    with pytest.raises(ValueError, match="invalid proc id"):
        ProcId.from_string("nope?")


def test_value_mesh_from_indexed() -> None:
    shape = Extent(["x"], [3]).region
    vm = ValueMesh.from_indexed(shape, [(2, "c"), (0, "a"), (1, "b")])
    assert list(vm.values()) == ["a", "b", "c"] and vm.get(rank=1) == "b"
    assert list(ValueMesh.from_indexed(shape, [(0, "a"), (1, "b"), (1, "q"),
                                                 (2, "c")]).values()) == ["a", "q", "c"]
    with pytest.raises(ValueError, match="expected 3 ranks"):
        ValueMesh.from_indexed(shape, [(0, "a"), (1, "b")])
    with pytest.raises(ValueError, match="outside"):
        ValueMesh.from_indexed(shape, [(0, "a"), (1, "b"), (5, "c")])


def test_extent_and_point_bytes_and_region() -> None:
    ext = Extent(["hosts", "gpus"], [2, 4])
    assert Extent.from_bytes(bytes(ext)) == ext
    point = Point(5, ext)
    assert Point.from_bytes(bytes(point)) == point
    region = ext.region
    assert region.labels == ("hosts", "gpus") and region.ranks() == list(range(8))
    with pytest.raises(ValueError, match="not the bytes"):
        Extent.from_bytes(b"garbage")


def test_an_actor_is_not_a_mesh() -> None:
    class Plain(Actor):
        def __init__(self) -> None:
            self.sizes = [1, 2]  # an attribute of that name is still allowed

    actor = Plain()
    assert actor.sizes == [1, 2]
    with pytest.raises(TypeError, match=r"not a mesh.*actor_instance\.stop"):
        actor.stop()
    with pytest.raises(TypeError, match="ActorMesh that spawn"):
        actor.slice(gpus=0)
    assert not hasattr(actor, "extent")
    with pytest.raises(AttributeError, match="not a mesh"):
        _ = actor.initialized


def test_names_without_meaning_here_say_what_to_use() -> None:
    with pytest.raises(RuntimeError, match=r"no client gateway.*attach_to_workers"):
        attach_client("tcp://gateway:1")
    with pytest.raises(RuntimeError, match=r"MAST.*regency\.job"):
        regency.mast_reserve()
    with pytest.raises(TypeError, match="spawn_procs"):
        ProcMesh.from_host_mesh(None, None, None)  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="Not yet supported"):
        RDMAAction().fetch_add(None, None, 1)  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="Not yet supported"):
        RDMAAction().compare_and_swap(None, None, 1, 2)  # type: ignore[arg-type]


def test_top_level_config_names() -> None:
    assert regency.configure is regency.config.configure
    with regency.configured(tail_log_lines=3) as values:
        assert values["tail_log_lines"] == 3


def test_returns_future_runs_once_when_first_observed() -> None:
    runs: list[str] = []

    @returns_future
    async def body(x: int) -> int:
        runs.append(threading.current_thread().name)
        await asyncio.sleep(0)
        return x * 2

    fut = body(21)
    assert runs == []  # calling starts nothing
    assert fut.get(timeout=10) == 42 and fut.get() == 42
    assert runs == [threading.current_thread().name]

    async def awaiting() -> int:
        return await body(5)

    assert asyncio.run(awaiting()) == 10
    with pytest.raises(TypeError, match="async def"):
        returns_future(lambda: 1)  # type: ignore[arg-type,return-value]


def test_returns_future_timeout_cancels_the_body() -> None:
    gate = threading.Event()

    @returns_future
    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            gate.set()

    fut = forever()
    with pytest.raises(TimeoutError):
        fut.get(timeout=0.05)
    assert gate.is_set()  # the body was cancelled, not left running
    with pytest.raises(TimeoutError, match="cancelled"):
        fut.get()


def test_returns_future_errors_travel() -> None:
    @returns_future
    async def boom() -> None:
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        boom().get(timeout=10)


def test_ndslice_matches_monarch() -> None:
    from regency import NDSlice

    # every value below is what Monarch 0.7.0 printed for the same calls
    s = NDSlice(offset=1, sizes=[2, 3], strides=[6, 2])
    assert list(s) == [1, 3, 5, 7, 9, 11]
    assert (s.get(4), s.index(9), s.coordinates(9), s.nditem([1, 2])) == (9, 4, [1, 1], 11)
    assert s.ndim == 2 and s.offset == 1 and s.sizes == [2, 3] and s.strides == [6, 2]
    assert NDSlice.from_list([0, 1, 2, 5, 6]) == [NDSlice(offset=0, sizes=[3], strides=[1]),
                                                  NDSlice(offset=5, sizes=[2], strides=[1])]
    assert NDSlice.new_row_major([0, 1, 2]).strides == [2, 2, 1]
    with pytest.raises(ValueError, match="value 2 not in slice"):
        s.index(2)
    with pytest.raises(IndexError):
        s.get(10)
    assert pickle.loads(pickle.dumps(s)) == s


def test_shape_monarch_members() -> None:
    from regency import NDSlice, Shape

    sh = Shape(["h", "g"], NDSlice(offset=1, sizes=[2, 3], strides=[6, 2]))
    assert sh.coordinates(9) == {"h": 1, "g": 1}
    assert sh.at("g", 1).labels == ("h",) and sh.at("g", 1).ranks() == [3, 9]
    assert sh.index(h=1).ranks() == [7, 9, 11]
    assert sh.select("g", slice(0, 2)).ranks() == [1, 3, 7, 9]
    assert sh.select(label="g", slice=slice(0, 2)) == sh.select("g", slice(0, 2))
    assert sh.ndslice == NDSlice(offset=1, sizes=[2, 3], strides=[6, 2])
    assert Shape.from_bytes(bytes(sh)) == sh and sh.region is sh


def test_selection() -> None:
    from regency import Selection, Shape

    sh = Shape.from_sizes(["h", "g"], [2, 4])
    assert Selection.all().ranks(sh) == list(range(8))
    assert len(Selection.any().ranks(sh)) == 1
    assert Selection.from_string("(*, 0:4:2)").ranks(sh) == [0, 2, 4, 6]
    assert Selection.from_string("1").ranks(sh) == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="not supported"):
        Selection.from_string("0 & (1 | 2)")
