"""Meshes, ports and value meshes travel: pickled, passed to actors, returned from endpoints;
actors that spawn procs and actors of their own."""

from __future__ import annotations

import os
import pickle

import pytest
from _pids import still_alive

from _actors import Counter, PassAround, Spawner
from regency.actor import ActorMesh, Channel, ProcMesh, ValueMesh, this_host

T = 20


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="passing")
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(scope="module")
def counters(procs):
    return procs.spawn("pass_counters", Counter, 0)


@pytest.fixture(scope="module")
def users(procs):
    return procs.spawn("pass_users", PassAround)


def test_meshes_pickle_round_trip_in_process(procs, counters) -> None:
    c2 = pickle.loads(pickle.dumps(counters))
    assert isinstance(c2, ActorMesh)
    assert c2.sizes == counters.sizes
    assert list(c2.echo.call(1).get(timeout=T).values()) == [1, 1]
    p2 = pickle.loads(pickle.dumps(procs))
    assert isinstance(p2, ProcMesh) and p2.sizes == {"gpus": 2}
    s2 = pickle.loads(pickle.dumps(counters.slice(gpus=1)))
    assert s2.sizes == {}
    assert s2.echo.call_one("s").get(timeout=T) == "s"


def test_actor_mesh_passed_to_actors(users, counters) -> None:
    vm = users.use_mesh.call(counters).get(timeout=T)
    # actor r calls echo(r) on the whole counters mesh
    assert list(vm.values()) == [[0, 0], [1, 1]]


def test_freshly_spawned_mesh_passed_on_at_once(users, procs) -> None:
    """The receiving actor may call the mesh before the spawn reached its procs."""
    for i in range(5):
        fresh = procs.spawn(f"fresh_{i}", Counter, i)
        assert list(users.use_mesh.call(fresh).get(timeout=T).values()) == [[0, 0], [1, 1]]


def test_sliced_mesh_passed_to_an_actor_keeps_its_slice(users, counters) -> None:
    got = users.slice(gpus=0).use_mesh.call_one(counters.slice(gpus=1)).get(timeout=T)
    assert got == [0]


def test_actor_mesh_returned_from_an_endpoint(users, counters) -> None:
    back = users.slice(gpus=1).return_mesh.call_one(counters).get(timeout=T)
    assert isinstance(back, ActorMesh)
    assert back.sizes == {"gpus": 2}
    assert list(back.echo.call("back").get(timeout=T).values()) == ["back", "back"]


def test_value_mesh_passed_and_returned(users, counters) -> None:
    vm = counters.echo.call(5).get(timeout=T)
    total, sizes, points = users.slice(gpus=0).sum_value_mesh.call_one(vm).get(timeout=T)
    assert (total, sizes, points) == (10, {"gpus": 2}, [{"gpus": 0}, {"gpus": 1}])
    made = users.slice(gpus=0).make_value_mesh.call_one(counters).get(timeout=T)
    assert isinstance(made, ValueMesh)
    assert made.sizes == {"gpus": 2}
    sub = vm.slice(gpus=1)
    total, sizes, points = users.slice(gpus=0).sum_value_mesh.call_one(sub).get(timeout=T)
    assert (total, sizes, points) == (5, {}, [{}])


def test_proc_mesh_passed_to_an_actor_which_spawns_on_it(users, procs) -> None:
    spawned = users.slice(gpus=0).spawn_on_proc_mesh.call_one(procs).get(timeout=T)
    assert isinstance(spawned, ActorMesh)
    assert spawned.sizes == {"gpus": 2}
    assert list(spawned.incr.call().get(timeout=T).values()) == [101, 101]


def test_port_opened_in_an_actor_passed_to_other_actors(users, procs) -> None:
    others = procs.spawn("pass_users_2", PassAround)
    got = users.slice(gpus=1).open_channel_and_wait.call_one(others).get(timeout=T)
    assert got == ["a", "a", "b", "b"]


def test_port_passed_through_two_hops(users) -> None:
    port, recv = Channel.open()
    # the controller's port goes to actor 0, which forwards it inside a call to both actors
    users.slice(gpus=0).to_port.call_one(port, ["direct"]).get(timeout=T)
    assert recv.recv().get(timeout=T) == "direct"


def test_actor_spawns_procs_and_actors_and_returns_them(procs) -> None:
    spawner = procs.slice(gpus=0).spawn("spawner", Spawner)
    kid_procs, kids = spawner.spawn_children.call_one(2).get(timeout=T)
    assert isinstance(kid_procs, ProcMesh)
    assert isinstance(kids, ActorMesh)
    assert kids.sizes == {"kids": 2}
    # the controller calls the grandchildren directly
    assert list(kids.incr.call(10).get(timeout=T).values()) == [1011, 1011]
    whos = list(kids.whoami.call().get(timeout=T).values())
    assert [w["actor_rank"] for w in whos] == [{"kids": 0}, {"kids": 1}]
    spawner_pid = spawner.pid.call_one().get(timeout=T)
    assert all(w["pid"] not in (os.getpid(), spawner_pid) for w in whos)
    # the controller can spawn on the proc mesh the actor created
    more = kid_procs.spawn("more", Counter, 1)
    assert list(more.incr.call().get(timeout=T).values()) == [2, 2]
    spawner.stop_children.call_one().get(timeout=T)
    alive = still_alive(w["pid"] for w in whos)
    assert not alive


def test_meshes_owned_by_an_actor_stop_with_it(procs) -> None:
    """A mesh cannot outlive its owner: stopping the spawning actor stops its procs."""
    spawner = procs.slice(gpus=1).spawn("owner", Spawner)
    _kid_procs, kids = spawner.spawn_children.call_one(1).get(timeout=T)
    kid_pids = list(kids.pid.call().get(timeout=T).values())
    spawner.stop().get(timeout=T)
    alive = still_alive(kid_pids)
    if alive:
        for p in alive:
            p.kill()
    assert not alive, "procs spawned by an actor outlived the actor"


def test_actor_spawns_on_its_own_proc(procs) -> None:
    spawner = procs.slice(gpus=1).spawn("local_spawner", Spawner)
    child = spawner.local_child.call_one().get(timeout=T)
    assert child.incr.call_one().get(timeout=T) == 8
    assert child.pid.call_one().get(timeout=T) == spawner.pid.call_one().get(timeout=T)


def test_procs_spawned_by_an_actor_stop_with_the_actors_proc_mesh() -> None:
    """Stopping a proc mesh stops every actor on it, and with them the meshes they own."""
    outer = this_host().spawn_procs(per_host={"gpus": 1}, name="outer")
    try:
        spawner = outer.spawn("outer_spawner", Spawner).slice(gpus=0)
        _kid_procs, kids = spawner.spawn_children.call_one(2).get(timeout=T)
        kid_pids = list(kids.pid.call().get(timeout=T).values())
    finally:
        outer.stop().get(timeout=T)
    alive = still_alive(kid_pids)
    for p in alive:
        p.kill()
    assert not alive, "procs spawned by an actor outlived the proc mesh of that actor"
