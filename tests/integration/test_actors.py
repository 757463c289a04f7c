"""Actor semantics: sync/async actors, explicit ports, concurrent endpoints, as_endpoint,
__init__ before messages, one message at a time, actors calling actors."""

from __future__ import annotations

import re

import pytest

from _actors import (
    AsyncCaller,
    AsyncCounter,
    Concurrent,
    Counter,
    ExplicitPort,
    InitOrder,
    OneAtATimeAsync,
    OneAtATimeSync,
    Rebinding,
    SlowInit,
    SyncCaller,
)
from regency.actor import Channel, as_endpoint, this_host, this_proc

T = 20


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(scope="module")
def counters(procs):
    return procs.spawn("counters", Counter, 0)


@pytest.fixture(scope="module")
def acounters(procs):
    return procs.spawn("acounters", AsyncCounter, 0)


# -- sync and async actors ---------------------------------------------------------------------
def test_sync_actor_state_is_per_actor(procs) -> None:
    c = procs.spawn("state", Counter, 10)
    c.slice(gpus=0).incr.call_one(5).get(timeout=T)
    assert list(c.value.call().get(timeout=T).values()) == [15, 10]


def test_an_attribute_of_the_instance_shadows_an_endpoint_while_it_is_there(procs) -> None:
    """Endpoints are looked up on the actor as Python does (the method is kept between
    messages, but never over an attribute of the instance that shadows it)."""
    one = procs.slice(gpus=0).spawn("rebinding", Rebinding)
    assert one.greet.call_one().get(timeout=T) == "class"
    one.rebind.call_one().get(timeout=T)
    assert one.greet.call_one().get(timeout=T) == "instance"
    one.unbind.call_one().get(timeout=T)
    assert one.greet.call_one().get(timeout=T) == "class"


def test_async_actor_basic(procs) -> None:
    a = procs.spawn("astate", AsyncCounter, 1)
    assert list(a.incr.call(2).get(timeout=T).values()) == [3, 3]
    assert a.slice(gpus=1).echo.call_one({"k": [1, 2]}).get(timeout=T) == {"k": [1, 2]}
    assert list(a.had_loop_in_init.call().get(timeout=T).values()) == [True, True]


def test_sync_actor_runs_without_an_event_loop(procs) -> None:
    mesh = procs.spawn("noloop", OneAtATimeSync)
    mesh.work.call(0).get(timeout=T)
    _max_active, _order, _threads, has_loop = mesh.slice(gpus=0).stats.call_one().get(timeout=T)
    assert has_loop is False


def test_init_runs_before_the_first_message(procs) -> None:
    port, recv = Channel.open()
    mesh = procs.spawn("init_order", InitOrder, port)
    # sent immediately after spawn returned: must see a fully constructed object
    states = mesh.state.call().get(timeout=T)
    assert list(states.values()) == [(True, 20000), (True, 20000)]
    assert [recv.recv().get(timeout=T) for _ in range(2)] == ["init-done", "init-done"]

    slow = procs.spawn("slow_init", SlowInit)
    assert list(slow.total_.call().get(timeout=T).values()) == [sum(range(200000))] * 2


# -- explicit response ports -------------------------------------------------------------------
def test_explicit_response_port_call_and_call_one(procs) -> None:
    mesh = procs.spawn("explicit", ExplicitPort)
    assert list(mesh.add.call(2, 3).get(timeout=T).values()) == [5, 5]
    assert mesh.slice(gpus=1).add.call_one(4, 4).get(timeout=T) == 8
    assert sorted(f.get(timeout=T) for f in mesh.add.stream(1, 1)) == [2, 2]
    # answering later from another thread works too
    assert mesh.slice(gpus=0).from_thread.call_one("hi").get(timeout=T) == "HI"


def test_explicit_response_port_is_once_only(procs) -> None:
    mesh = procs.spawn("explicit_once", ExplicitPort).slice(gpus=0)
    assert mesh.send_twice.call_one().get(timeout=T) == 1
    err = mesh.last_error.call_one().get(timeout=T)
    assert err is not None and "already used" in err


def test_explicit_port_exception_arrives_unwrapped(procs) -> None:
    mesh = procs.spawn("explicit_exc", ExplicitPort).slice(gpus=0)
    with pytest.raises(ValueError, match="via port"):
        mesh.send_exception.call_one().get(timeout=T)


def test_explicit_port_signature_excludes_the_port(procs) -> None:
    mesh = procs.spawn("explicit_sig", ExplicitPort)
    with pytest.raises(TypeError):
        mesh.add.call(1)  # b missing (the port is not a caller argument)


# -- concurrency -------------------------------------------------------------------------------
def test_concurrent_endpoint_lets_the_next_message_in(procs) -> None:
    mesh = procs.spawn("concurrent", Concurrent).slice(gpus=0)
    waiting = mesh.wait_for_release.call_one("a")
    # if the actor were blocked in the first body, this second message would never run
    # and neither future would complete
    assert mesh.release.call_one().get(timeout=T) == "ok"
    assert waiting.get(timeout=T) == "released a"
    log = mesh.get_log.call_one().get(timeout=T)
    assert log.index("start a") < log.index("release") < log.index("end a")


def test_several_concurrent_bodies_in_flight(procs) -> None:
    mesh = procs.spawn("concurrent_many", Concurrent).slice(gpus=1)
    waiting = [mesh.wait_for_release.call_one(str(i)) for i in range(5)]
    mesh.release.call_one().get(timeout=T)
    assert [f.get(timeout=T) for f in waiting] == [f"released {i}" for i in range(5)]
    log = mesh.get_log.call_one().get(timeout=T)
    # bodies from one sender start in order
    starts = [e for e in log if e.startswith("start")]
    assert starts == [f"start {i}" for i in range(5)]


def test_async_actor_handles_one_message_at_a_time(procs) -> None:
    mesh = procs.spawn("one_at_a_time", OneAtATimeAsync)
    futures = [mesh.work.call(i) for i in range(30)]
    for f in futures:
        f.get(timeout=T)
    for max_active, order in mesh.stats.call().get(timeout=T).values():
        assert max_active == 1
        assert order == list(range(30))


def test_sync_actor_handles_one_message_at_a_time_on_one_thread(procs) -> None:
    mesh = procs.spawn("one_at_a_time_sync", OneAtATimeSync)
    futures = [mesh.work.call(i) for i in range(30)]
    for f in futures:
        f.get(timeout=T)
    for max_active, order, n_threads, _ in mesh.stats.call().get(timeout=T).values():
        assert max_active == 1
        assert order == list(range(30))
        assert n_threads == 1


# -- as_endpoint -------------------------------------------------------------------------------
def test_as_endpoint_calls_a_non_endpoint_method(counters) -> None:
    ep = as_endpoint(counters.helper)
    assert list(ep.call().get(timeout=T).values()) == [42, 42]
    assert ep.call(2).get(timeout=T).get(0) == 84
    assert as_endpoint(counters.slice(gpus=1).helper).call_one(3).get(timeout=T) == 126
    assert as_endpoint(counters.value) is counters.value  # an endpoint already: itself
    for wrong in (lambda x: x, 3):  # Monarch's type and words (regency's earlier type too)
        with pytest.raises(ValueError, match="expected a method of a spawned actor"):
            as_endpoint(wrong)
        with pytest.raises(TypeError):
            as_endpoint(wrong)


def test_a_mesh_is_not_indexed_and_says_how_to_select(counters) -> None:
    with pytest.raises(TypeError, match=r"not subscriptable: select members with "
                                        r"mesh.slice\(gpus=0\)"):
        counters[0]
    with pytest.raises(TypeError, match="not iterable"):  # Monarch's words, at once
        iter(counters)
    with pytest.raises(TypeError, match=re.escape("per_host must be a dict of dimension "
                                                  "sizes, such as {'gpus': 4}")):
        this_host().spawn_procs(per_host=4)


def test_non_endpoint_method_explains_itself(counters) -> None:
    with pytest.raises(RuntimeError, match="endpoint"):
        counters.helper.call()
    with pytest.raises(RuntimeError, match="endpoint"):
        counters.helper()
    with pytest.raises(AttributeError, match="not annotated as an endpoint"):  # Monarch's type
        counters.helper.call()


# -- actors calling actors ---------------------------------------------------------------------
def test_sync_actor_blocks_on_another_actor(procs, counters) -> None:
    caller = procs.spawn("sync_caller", SyncCaller).slice(gpus=1)
    base = counters.value.call().get(timeout=T).get(0)
    assert caller.call_value.call_one(counters).get(timeout=T) == list(
        counters.value.call().get(timeout=T).values())
    assert caller.call_one_incr.call_one(counters).get(timeout=T) == base + 1


def test_async_actor_awaits_another_actor(procs, acounters, counters) -> None:
    caller = procs.spawn("async_caller", AsyncCaller)
    vals = caller.call_value.call(acounters).get(timeout=T)
    assert len(vals) == 2
    expected = list(acounters.value.call().get(timeout=T).values())
    assert list(vals.values()) == [expected, expected]
    before = counters.slice(gpus=0).value.call_one().get(timeout=T)
    got = caller.slice(gpus=0).gather.call_one(counters, 5).get(timeout=T)
    assert got == list(range(before + 1, before + 6))


def test_actor_in_controller_process_calls_remote_actor(counters) -> None:
    local = this_proc().spawn("local_caller", SyncCaller)
    assert local.call_value.call_one(counters).get(timeout=T) == list(
        counters.value.call().get(timeout=T).values())
    local.stop().get(timeout=T)


def test_blocking_self_call_raises_instead_of_deadlocking(procs) -> None:
    mesh = procs.spawn("self_caller", Counter, 0)
    other = procs.spawn("other_counter", Counter, 5)
    # calling another mesh from inside works
    assert mesh.slice(gpus=0).call_mesh.call_one(other).get(timeout=T) == [5, 5]
    # calling the mesh the actor belongs to would deadlock: it must raise at once
    from regency.actor import ActorError

    with pytest.raises(ActorError, match="deadlock"):
        mesh.slice(gpus=0).call_mesh.call_one(mesh).get(timeout=T)
    # and the actor is still fine
    assert mesh.slice(gpus=0).value.call_one().get(timeout=T) == 0


def test_actor_class_defined_inside_a_function(procs) -> None:
    """A class that cannot be imported in the procs travels by value."""
    from regency.actor import Actor, endpoint

    factor = 7

    class Local(Actor):
        def __init__(self, base: int) -> None:
            self.base = base

        @endpoint
        def compute(self, x: int) -> int:
            return self.base + x * factor

    mesh = procs.spawn("local_class", Local, 1)
    assert list(mesh.compute.call(2).get(timeout=T).values()) == [15, 15]


def test_async_actor_in_controller_process_awaits_remote_actor(counters) -> None:
    local = this_proc().spawn("local_async_caller", AsyncCaller)
    assert local.call_value.call_one(counters).get(timeout=T) == list(
        counters.value.call().get(timeout=T).values())
    local.stop().get(timeout=T)
