"""Messaging adverbs, Futures, ValueMesh, Channels/Ports and get_or_spawn_controller."""

from __future__ import annotations

import asyncio
import logging
import os
import threading

import pytest

from _actors import Concurrent, Counter, PassAround, Registry
from regency.actor import (
    Accumulator,
    Channel,
    Future,
    Point,
    ValueMesh,
    get_or_spawn_controller,
    send,
    this_host,
)
from regency.testing import delay_calls

T = 20


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(scope="module")
def counters(procs):
    return procs.spawn("adverb_counters", Counter, 0)


# -- call --------------------------------------------------------------------------------------
def test_call_returns_value_mesh_with_the_mesh_shape(counters) -> None:
    vm = counters.whoami.call().get(timeout=T)
    assert isinstance(vm, ValueMesh)
    assert vm.sizes == {"hosts": 2, "gpus": 2}
    assert len(vm) == 4
    for point, who in vm.items():
        assert isinstance(point, Point)
        assert dict(point) == who["actor_rank"]
        assert point.rank == who["actor_rank_rank"]


def test_call_on_a_slice_keys_values_by_message_rank(counters) -> None:
    sub = counters.slice(gpus=1)
    vm = sub.whoami.call().get(timeout=T)
    assert vm.sizes == {"hosts": 2}
    assert [dict(p) for p, _ in vm.items()] == [{"hosts": 0}, {"hosts": 1}]
    assert [w["actor_rank"] for w in vm.values()] == [{"hosts": 0, "gpus": 1},
                                                       {"hosts": 1, "gpus": 1}]


def test_call_one(counters) -> None:
    one = counters.slice(hosts=1, gpus=0)
    assert one.sizes == {}
    who = one.whoami.call_one().get(timeout=T)
    assert who["actor_rank"] == {"hosts": 1, "gpus": 0}
    # a 1-element mesh that keeps its dimensions works too
    who2 = counters.slice(hosts=slice(0, 1), gpus=slice(1, 2)).whoami.call_one().get(timeout=T)
    assert who2["actor_rank"] == {"hosts": 0, "gpus": 1}
    with pytest.raises(ValueError, match="call_one requires exactly 1 actor, but mesh has 4"):
        counters.whoami.call_one()


def test_choose_reaches_one_actor(procs) -> None:
    mesh = procs.spawn("choose", Counter, 0)
    for _ in range(20):
        assert mesh.incr.choose().get(timeout=T) >= 1
    values = list(mesh.value.call().get(timeout=T).values())
    assert sum(values) == 20  # each choose hit exactly one actor


def test_stream_yields_all_values(counters) -> None:
    got = [f.get(timeout=T) for f in counters.echo.stream("x")]
    assert got == ["x"] * 4
    ranks = sorted(f.get(timeout=T)["actor_rank_rank"] for f in counters.whoami.stream())
    assert ranks == [0, 1, 2, 3]


def test_broadcast_effect_is_observable_afterwards(procs) -> None:
    mesh = procs.spawn("bcast", Counter, 0)
    assert mesh.incr.broadcast(5) is None
    mesh.incr.broadcast(1)
    # per-sender FIFO: the call is handled after both broadcasts
    assert list(mesh.value.call().get(timeout=T).values()) == [6] * 4


def test_choose_tells_the_member_its_point_in_the_whole_mesh(counters) -> None:
    # Monarch's: the chosen actor's current_rank() is its own point, its size the mesh's
    for _ in range(8):
        me = counters.whoami.choose().get(timeout=T)
        assert me["current_rank"] == me["actor_rank"]
        assert me["current_size"] == {"hosts": 2, "gpus": 2}
    me = counters.slice(hosts=1).whoami.choose().get(timeout=T)
    assert me["current_size"] == {"gpus": 2}  # the whole of the mesh it was called on
    assert me["current_rank"] == {"gpus": me["actor_rank"]["gpus"]}


def test_send_with_port_and_choose(counters) -> None:
    port, recv = Channel.open()
    send(counters.echo, ("sent",), {}, port=port)
    assert sorted(recv.recv().get(timeout=T) for _ in range(4)) == ["sent"] * 4
    send(counters.echo, (), {"x": "chosen"}, port=port, selection="choose")
    assert recv.recv().get(timeout=T) == "chosen"
    with pytest.raises(TimeoutError):
        recv.recv().get(timeout=0.3)  # exactly one reply for selection="choose"


def test_send_without_port_is_fire_and_forget(procs) -> None:
    mesh = procs.spawn("send_bcast", Counter, 0)
    send(mesh.incr, (3,), {})
    assert list(mesh.value.call().get(timeout=T).values()) == [3] * 4


def test_accumulator(counters) -> None:
    acc = Accumulator(counters.echo, 100, lambda a, r: a + r)
    assert acc.accumulate(1).get(timeout=T) == 104
    strings = Accumulator(counters.whoami, (), lambda a, r: (*a, r["actor_rank_rank"]))
    assert sorted(strings.accumulate().get(timeout=T)) == [0, 1, 2, 3]


def test_accumulator_whose_reducer_raises_fails_with_that_error(counters) -> None:
    def reducer(acc: int, reply: int) -> int:
        raise ZeroDivisionError("reducer failed")

    with pytest.raises(ZeroDivisionError, match="reducer failed"):  # Monarch's: not a hang
        Accumulator(counters.echo, 0, reducer).accumulate(1).get(timeout=T)


# -- Future ------------------------------------------------------------------------------------
def test_future_cannot_be_constructed() -> None:
    with pytest.raises(TypeError):
        Future()


def test_get_timeout_does_not_consume_the_future(procs) -> None:
    mesh = procs.spawn("timeout", Concurrent).slice(hosts=0, gpus=0)
    fut = mesh.wait_for_release.call_one("t")
    with pytest.raises(TimeoutError):
        fut.get(timeout=0.2)
    assert not fut.done()
    mesh.release.call_one().get(timeout=T)
    assert fut.get(timeout=T) == "released t"
    assert fut.get() == "released t"  # cached
    assert fut.result() == "released t"
    assert fut.exception() is None


def test_get_rejects_bad_timeouts(counters) -> None:
    fut = counters.value.call()
    with pytest.raises(ValueError):
        fut.get(timeout=-1)
    fut.get(timeout=T)


def test_future_exception_and_result(counters) -> None:
    from regency.actor import ActorError

    fut = counters.slice(hosts=0, gpus=0).fail.call_one("boom")
    exc = fut.exception(timeout=T)
    assert isinstance(exc, ActorError)
    with pytest.raises(ActorError):
        fut.result(timeout=T)
    with pytest.raises(ActorError):
        fut.get()  # raising again: the outcome is cached


def test_await_from_asyncio_run(counters) -> None:
    async def main():
        vm = await counters.echo.call(7)
        one = await counters.slice(hosts=0, gpus=1).echo.call_one("a")
        fut = counters.slice(hosts=1, gpus=1).echo.call_one("b")
        first = await fut
        second = await fut  # awaiting twice works
        both = await asyncio.gather(counters.value.call().as_asyncio(),
                                    counters.echo.choose("c").as_asyncio())
        waited = await asyncio.wait_for(counters.echo.choose("d").as_asyncio(), T)
        return list(vm.values()), one, first, second, both[1], waited

    assert asyncio.run(main()) == ([7] * 4, "a", "b", "b", "c", "d")


def test_a_reply_after_its_awaiting_loop_closed_is_dropped_quietly(counters, caplog) -> None:
    """An awaited call abandoned (a timeout, a failed gather) whose reply comes after
    ``asyncio.run`` closed its loop: nothing to deliver it to, and nothing to print."""
    one = counters.slice(hosts=0, gpus=0)
    delay_calls(one.echo, 0.5)  # the reply must not beat the abandon (a busy machine)

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(one.echo.call_one("late").as_asyncio(), 0)

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
        # one actor answers in order: once this reply is here, the late one was handled
        assert one.echo.call_one("next").get(timeout=T) == "next"
    assert not [r for r in caplog.records if "closed" in r.getMessage()
                or "closed" in str(r.exc_info)], caplog.text


def test_await_without_loop_is_an_error(counters) -> None:
    fut = counters.slice(hosts=0, gpus=0).echo.call_one(1)
    fut.get(timeout=T)
    fut2 = counters.slice(hosts=0, gpus=0).echo.call_one(2)
    with pytest.raises((ValueError, RuntimeError)):
        # driving the awaitable by hand, outside any event loop
        fut2.__await__().send(None)
    fut2.get(timeout=T)


def test_get_from_many_threads(counters) -> None:
    results: list[int] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for _ in range(10):
                results.append(counters.slice(hosts=i % 2, gpus=0).echo.call_one(i).get(timeout=T))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=T)
    assert not errors
    assert sorted(results) == sorted(i for i in range(4) for _ in range(10))


# -- ValueMesh ---------------------------------------------------------------------------------
def test_value_mesh_access(counters) -> None:
    vm = counters.whoami.call().get(timeout=T)
    values = list(vm.values())
    assert [w["actor_rank"] for w in values] == [
        {"hosts": 0, "gpus": 0}, {"hosts": 0, "gpus": 1},
        {"hosts": 1, "gpus": 0}, {"hosts": 1, "gpus": 1}]
    assert vm.item(hosts=1, gpus=0) is values[2]
    assert vm.get(3) is values[3]
    assert vm[1] is values[1]
    point = next(p for p, _ in vm.items() if dict(p) == {"hosts": 1, "gpus": 1})
    assert vm[point] is values[3]
    assert vm[{"hosts": 0, "gpus": 1}] is values[1]
    with pytest.raises(KeyError):
        vm.item(hosts=0)
    with pytest.raises(KeyError):
        vm.item(hosts=0, gpus=0, extra=1)
    with pytest.raises(IndexError):
        vm.get(4)

    sub = vm.slice(hosts=1)
    assert sub.sizes == {"gpus": 2}
    assert [w["actor_rank"] for w in sub.values()] == [{"hosts": 1, "gpus": 0},
                                                        {"hosts": 1, "gpus": 1}]
    assert sub.item(gpus=1) is values[3]
    assert [dict(p) for p, _ in sub.items()] == [{"gpus": 0}, {"gpus": 1}]
    col = vm.slice(gpus=1)
    assert col.get(1) is values[3]

    flat = vm.flatten("all")
    assert flat.sizes == {"all": 4}
    assert list(flat.values()) == values
    assert flat.item(all=2) is values[2]

    zero = vm.slice(hosts=0, gpus=1)
    assert zero.item() is values[1]
    assert len(zero) == 1


# -- Channel / Port ----------------------------------------------------------------------------
def test_channel_port_passed_to_actors(counters, procs) -> None:
    users = procs.spawn("port_users", PassAround)
    port, recv = Channel.open()
    n = users.to_port.call(port, [1, 2, 3]).get(timeout=T)
    assert list(n.values()) == [3] * 4
    got = [recv.recv().get(timeout=T) for _ in range(12)]
    assert sorted(got) == sorted([1, 2, 3] * 4)
    # per-sender order on the port is kept
    one_port, one_recv = Channel.open()
    users.slice(hosts=0, gpus=0).to_port.call_one(one_port, list(range(50))).get(timeout=T)
    assert [one_recv.recv().get(timeout=T) for _ in range(50)] == list(range(50))


def test_channel_send_from_the_controller_itself() -> None:
    port, recv = Channel.open()
    fut = recv.recv()  # receive posted before the value arrives
    port.send("early-receiver")
    port.send("late-receiver")
    assert fut.get(timeout=T) == "early-receiver"
    assert recv.recv().get(timeout=T) == "late-receiver"


def test_channel_once(counters) -> None:
    port, recv = Channel.open(once=True)
    port.send("only")
    with pytest.raises(RuntimeError):
        port.send("twice")
    assert recv.recv().get(timeout=T) == "only"
    second = recv.recv()  # there is no second message: it fails, it does not wait for ever
    with pytest.raises(ValueError, match="OncePort is already used"):
        second.get(timeout=T)


def test_channel_once_port_shipped_to_an_actor(procs) -> None:
    users = procs.spawn("once_users", PassAround).slice(hosts=0, gpus=0)
    port, recv = Channel.open(once=True)
    with pytest.raises(Exception):  # noqa: B017 - ActorError wrapping the once-port error
        users.to_port.call_one(port, ["x", "y"]).get(timeout=T)
    assert recv.recv().get(timeout=T) == "x"


def test_channel_once_port_accepts_only_one_message_even_when_copied(procs) -> None:
    """A once port takes one message in total: copies shipped to two actors cannot both
    deliver."""
    users = procs.spawn("once_two", PassAround).slice(hosts=0)
    port, recv = Channel.open(once=True)
    vm = users.to_port.call(port, ["v"]).get(timeout=T)  # each of the 2 actors sends once
    assert list(vm.values()) == [1, 1]
    assert recv.recv().get(timeout=T) == "v"
    # Both sends happened before the replies, on the same connections, so anything more
    # would already be here (in the receiver's queue), and a second recv() says so at once.
    assert not recv._items, "a once port delivered a second message"
    with pytest.raises(ValueError, match="OncePort is already used"):
        recv.recv().get(timeout=T)


def test_open_ranked_receives_rank(counters) -> None:
    port, recv = Channel.open_ranked()
    send(counters.echo, ("r",), {}, port=port)
    got = sorted(recv.recv().get(timeout=T) for _ in range(4))
    assert got == [(0, "r"), (1, "r"), (2, "r"), (3, "r")]


def test_recv_timeout_then_value(counters) -> None:
    port, recv = Channel.open()
    fut = recv.recv()
    with pytest.raises(TimeoutError):
        fut.get(timeout=0.2)
    port.send(5)
    assert fut.get(timeout=T) == 5


# -- get_or_spawn_controller -------------------------------------------------------------------
def test_get_or_spawn_controller_returns_the_same_mesh() -> None:
    first = get_or_spawn_controller("test_registry", Registry, "first").get(timeout=T)
    second = get_or_spawn_controller("test_registry", Registry, "second").get(timeout=T)
    assert first.add.call_one("a").get(timeout=T) == 1
    assert second.add.call_one("b").get(timeout=T) == 2
    tag, items, pid = first.info.call_one().get(timeout=T)
    assert (tag, items) == ("first", ["a", "b"])  # later args were ignored
    assert pid == os.getpid()  # lives in the controller process
    other = get_or_spawn_controller("other_registry", Registry, "other").get(timeout=T)
    assert other.info.call_one().get(timeout=T)[:2] == ("other", [])


def test_get_or_spawn_controller_from_an_actor(procs) -> None:
    from _actors import ControllerUser

    reg = get_or_spawn_controller("shared_registry", Registry, "shared").get(timeout=T)
    reg.add.call_one("from-client").get(timeout=T)
    users = procs.spawn("ctrl_users", ControllerUser)
    results = list(users.slice(hosts=0).use.call("shared_registry").get(timeout=T).values())
    # both actors reached the one singleton, which lives in the controller process
    assert sorted(n for n, _ in results) == [2, 3]
    assert {pid for _, pid in results} == {os.getpid()}
    tag, items, _ = reg.info.call_one().get(timeout=T)
    assert tag == "shared"
    assert sorted(items) == ["actor-0", "actor-1", "from-client"]
