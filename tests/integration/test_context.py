"""context(), current_rank(), current_size() and the actor_instance fields."""

from __future__ import annotations

import os
from typing import Any

import pytest

from _actors import AsyncCounter, Counter
from regency.actor import (
    Actor,
    Channel,
    context,
    current_actor_name,
    current_rank,
    current_size,
    endpoint,
    this_host,
)

T = 20


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"gpus": 4}, name="ctxprocs")
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(scope="module", params=["sync", "async"])
def mesh(request, procs):
    cls = Counter if request.param == "sync" else AsyncCounter
    return procs.spawn(f"ctx_{request.param}", cls, 0)


def test_context_on_the_controller() -> None:
    ctx = context()
    assert dict(ctx.message_rank) == {}
    assert dict(current_rank()) == {}
    assert current_size() == {}
    assert ctx.actor_instance.name == "root"
    assert repr(ctx.actor_instance) == "<root>"
    assert dict(ctx.actor_instance.rank) == {}
    assert isinstance(current_actor_name(), str) and current_actor_name()


def test_full_mesh_message_rank_equals_actor_rank(mesh) -> None:
    for point, who in mesh.whoami.call().get(timeout=T).items():
        assert who["message_rank"] == who["actor_rank"] == dict(point)
        assert who["current_rank"] == who["message_rank"]
        assert who["current_size"] == {"gpus": 4}


def test_message_rank_within_a_slice(mesh) -> None:
    vm = mesh.slice(gpus=slice(1, 3)).whoami.call().get(timeout=T)
    whos = list(vm.values())
    assert [w["message_rank"] for w in whos] == [{"gpus": 0}, {"gpus": 1}]
    assert [w["message_rank_rank"] for w in whos] == [0, 1]
    assert [w["actor_rank"] for w in whos] == [{"gpus": 1}, {"gpus": 2}]
    assert [w["actor_rank_rank"] for w in whos] == [1, 2]
    assert all(w["current_size"] == {"gpus": 2} for w in whos)


def test_message_rank_of_a_point_call(mesh) -> None:
    who = mesh.slice(gpus=3).whoami.call_one().get(timeout=T)
    assert who["message_rank"] == {}
    assert who["current_size"] == {}
    assert who["actor_rank"] == {"gpus": 3}


def test_message_rank_after_flatten_and_rename(mesh) -> None:
    renamed = mesh.rename(gpus="workers")
    whos = list(renamed.whoami.call().get(timeout=T).values())
    assert [w["message_rank"] for w in whos] == [{"workers": i} for i in range(4)]
    assert [w["actor_rank"] for w in whos] == [{"gpus": i} for i in range(4)]
    split = mesh.split(gpus=("a", "b"), b=2)
    whos = list(split.whoami.call().get(timeout=T).values())
    assert [w["message_rank"] for w in whos] == [
        {"a": 0, "b": 0}, {"a": 0, "b": 1}, {"a": 1, "b": 0}, {"a": 1, "b": 1}]
    assert all(w["current_size"] == {"a": 2, "b": 2} for w in whos)


def test_actor_instance_fields(mesh, procs) -> None:
    whos = list(mesh.whoami.call().get(timeout=T).values())
    for i, w in enumerate(whos):
        assert w["name"] in ("ctx_sync", "ctx_async")
        assert w["class_name"] in ("_actors.Counter", "_actors.AsyncCounter")
        assert w["actor_rank"] == {"gpus": i}
        assert w["proc_mesh_sizes"] == {"gpus": 4}
        assert w["proc_sizes"] == {}
        assert w["pid"] != os.getpid()
        assert w["name"] in w["repr"]
        assert w["class_name"] in w["repr"]
    ids = [w["actor_id"] for w in whos]
    assert len(set(ids)) == 4
    procs_ids = [w["proc_id"] for w in whos]
    assert len(set(procs_ids)) == 4


def test_creator_of_a_mesh_spawned_by_the_controller_is_root(mesh) -> None:
    """The spec: ``creator`` describes the spawner; its repr is ``<root>`` for the client,
    and the instance repr is the qualified path ``<root>.<module.Class name{...}>``."""
    who = mesh.slice(gpus=0).whoami.call_one().get(timeout=T)
    assert who["creator"] == "<root>"
    assert who["repr"].startswith("<root>.<")


class HookRanks(Actor):
    """Reports ``current_rank()`` in ``__supervise__`` and ``__cleanup__``."""

    def __init__(self, port: Any) -> None:
        self.port = port
        self.kids: Any = None

    @endpoint
    def rank(self) -> dict[str, int]:
        return dict(current_rank())

    @endpoint
    def fail_a_kid(self) -> None:
        procs = this_host().spawn_procs(per_host={"k": 1}, name="hookkids")
        self.kids = procs.spawn("kid", HookRanks, self.port)
        self.kids.boom.broadcast()

    @endpoint
    def boom(self) -> None:
        raise ValueError("kid fails")

    def __supervise__(self, failure: Any) -> bool:
        self.port.send(("supervise", repr(current_rank()), current_size()))
        return True

    def __cleanup__(self, exc: BaseException | None) -> None:
        if exc is None:
            self.port.send(("cleanup", repr(current_rank()), current_size()))


def test_hooks_run_for_no_message_an_empty_rank(procs) -> None:
    """As in Monarch: not the rank of the last message handled (it leaked in)."""
    port, recv = Channel.open()
    mesh = procs.spawn("hookranks", HookRanks, port)
    assert mesh.slice(gpus=slice(1, 3)).rank.call().get(timeout=T).values() == [
        {"gpus": 0}, {"gpus": 1}]
    mesh.slice(gpus=2).fail_a_kid.call_one().get(timeout=T)
    assert recv.recv().get(timeout=T) == ("supervise", "{}", {})
    mesh.slice(gpus=2).stop().get(timeout=T)
    assert recv.recv().get(timeout=T) == ("cleanup", "{}", {})
