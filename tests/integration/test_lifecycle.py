"""Creating and stopping meshes: this_host/this_proc, spawn_procs, spawn, stop, shutdown."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from _actors import (
    AsyncCleanup,
    Cleanup,
    Complete,
    Counter,
    FileCleanup,
    HoldsItsCleanup,
    Incomplete,
    NeedsArgs,
    NoArgs,
    NotAnActor,
    NotingOwner,
)
from regency.actor import (
    Channel,
    HostMesh,
    ProcMesh,
    SupervisionError,
    this_host,
    this_proc,
)

T = 20  # generous per-call timeout: every wait is bounded


def test_this_host_and_this_proc_on_the_controller() -> None:
    host = this_host()
    assert isinstance(host, HostMesh)
    assert len(host) == 1
    assert host.sizes == {}
    proc = this_proc()
    assert isinstance(proc, ProcMesh)
    assert len(proc) == 1
    assert proc.sizes == {}
    with pytest.raises(RuntimeError, match="reference"):
        host.shutdown()


def test_this_proc_spawn_runs_in_the_controller_process() -> None:
    counters = this_proc().spawn("local_counter", Counter, 5)
    assert counters.pid.call_one().get(timeout=T) == os.getpid()
    assert counters.incr.call_one(2).get(timeout=T) == 7
    counters.stop().get(timeout=T)


def test_spawn_procs_one_dim() -> None:
    procs = this_host().spawn_procs(per_host={"workers": 3})
    try:
        assert procs.sizes == {"workers": 3}
        assert procs.initialized.get(timeout=T) is True
        counters = procs.spawn("c", Counter, 1)
        vm = counters.incr.call().get(timeout=T)
        assert vm.sizes == {"workers": 3}
        assert list(vm.values()) == [2, 2, 2]
        pids = list(counters.pid.call().get(timeout=T).values())
        assert len(set(pids)) == 3
        assert os.getpid() not in pids
    finally:
        procs.stop().get(timeout=T)


def test_spawn_procs_two_dims_with_arbitrary_names() -> None:
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 3})
    try:
        assert procs.sizes == {"hosts": 2, "gpus": 3}
        counters = procs.spawn("c2", Counter)
        who = counters.whoami.call().get(timeout=T)
        assert who.sizes == {"hosts": 2, "gpus": 3}
        coords = [w["actor_rank"] for w in who.values()]
        assert coords == [{"hosts": h, "gpus": g} for h in range(2) for g in range(3)]
        assert who.item(hosts=1, gpus=2)["actor_rank"] == {"hosts": 1, "gpus": 2}
        sub = counters.slice(hosts=1)
        assert sub.sizes == {"gpus": 3}
        assert [w["actor_rank"] for w in sub.whoami.call().get(timeout=T).values()] == [
            {"hosts": 1, "gpus": g} for g in range(3)
        ]
    finally:
        procs.stop().get(timeout=T)


def test_spawn_procs_default_single_proc() -> None:
    procs = this_host().spawn_procs()
    try:
        assert len(procs) == 1
        c = procs.spawn("single", Counter, 3)
        assert c.incr.call_one().get(timeout=T) == 4
    finally:
        procs.stop().get(timeout=T)


def test_spawn_procs_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        this_host().spawn_procs(per_host={"gpus": 0})


@pytest.fixture(scope="module")
def procs2():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    yield procs
    procs.stop().get(timeout=T)


def test_spawn_checks_init_arguments_eagerly(procs2) -> None:
    with pytest.raises(TypeError, match="'a'"):
        procs2.spawn("na", NeedsArgs)  # missing 'a'
    with pytest.raises(TypeError):
        procs2.spawn("na", NeedsArgs, 1, "b", "too many")
    with pytest.raises(TypeError):
        procs2.spawn("na", NeedsArgs, 1, c=3)
    ok = procs2.spawn("na", NeedsArgs, 1, b="y")
    assert list(ok.get.call().get(timeout=T).values()) == [(1, "y"), (1, "y")]


def test_spawn_rejects_non_actor(procs2) -> None:
    with pytest.raises(ValueError):
        procs2.spawn("bad", NotAnActor)


def test_actor_without_endpoints_spawns(procs2) -> None:
    mesh = procs2.spawn("noargs", NoArgs)
    assert mesh.initialized.get(timeout=T) is None
    mesh.stop().get(timeout=T)


def test_same_name_twice_gives_independent_meshes(procs2) -> None:
    a = procs2.spawn("same", Counter, 0)
    b = procs2.spawn("same", Counter, 100)
    a.incr.call().get(timeout=T)
    assert list(a.value.call().get(timeout=T).values()) == [1, 1]
    assert list(b.value.call().get(timeout=T).values()) == [100, 100]


def test_actor_mesh_stop_runs_cleanup_and_later_calls_fail(procs2) -> None:
    port, recv = Channel.open()
    mesh = procs2.spawn("cleanup", Cleanup, port)
    assert sorted(mesh.ping.call().get(timeout=T).values()) == [0, 1]
    mesh.stop().get(timeout=T)
    got = sorted(recv.recv().get(timeout=T) for _ in range(2))
    assert got == [("cleanup", 0, "None", 1), ("cleanup", 1, "None", 1)]
    with pytest.raises(SupervisionError):
        mesh.ping.call().get(timeout=T)
    # the procs are still fine: a new actor mesh works there
    again = procs2.spawn("after_stop", Counter, 0)
    assert list(again.incr.call().get(timeout=T).values()) == [1, 1]


def test_async_actor_cleanup_runs_on_stop(procs2) -> None:
    port, recv = Channel.open()
    mesh = procs2.spawn("acleanup", AsyncCleanup, port)
    assert sorted(mesh.ping.call().get(timeout=T).values()) == [0, 1]
    mesh.stop().get(timeout=T)
    got = sorted(recv.recv().get(timeout=T) for _ in range(2))
    assert got == [("async-cleanup", 0, "None"), ("async-cleanup", 1, "None")]


def test_stop_of_a_slice_stops_only_that_slice(procs2) -> None:
    port, recv = Channel.open()
    mesh = procs2.spawn("cleanup_slice", Cleanup, port)
    mesh.slice(gpus=1).stop().get(timeout=T)
    assert recv.recv().get(timeout=T)[:2] == ("cleanup", 1)
    assert mesh.slice(gpus=0).ping.call_one().get(timeout=T) == 0


def test_proc_mesh_stop_runs_cleanup_and_forbids_spawn(tmp_path) -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("fc", FileCleanup, str(tmp_path / "cleanup"))
    assert list(mesh.ping.call().get(timeout=T).values()) == ["pong", "pong"]
    pids = list(procs.spawn("pids", Counter).pid.call().get(timeout=T).values())
    procs.stop().get(timeout=T)
    for rank in range(2):
        assert (tmp_path / f"cleanup.{rank}").read_text() == "cleanup None"
    with pytest.raises(RuntimeError, match="stopped"):
        procs.spawn("again", Counter)
    with pytest.raises(RuntimeError, match="`ProcMesh` has already been stopped"):  # Monarch's
        procs.slice(gpus=0)
    import psutil

    _gone, alive = psutil.wait_procs([_proc_or_none(p) for p in pids if _proc_or_none(p)],
                                    timeout=5)
    assert not alive
    # a second stop is harmless
    procs.stop().get(timeout=T)


def _proc_or_none(pid: int):
    import psutil

    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def test_async_with_proc_mesh_stops_it() -> None:
    port, recv = Channel.open()

    async def main() -> tuple[ProcMesh, list[int]]:
        async with this_host().spawn_procs(per_host={"gpus": 2}) as procs:
            mesh = procs.spawn("cm", Cleanup, port)
            vm = await mesh.ping.call()
            return procs, sorted(vm.values())

    procs, ranks = asyncio.run(main())
    assert ranks == [0, 1]
    got = sorted(recv.recv().get(timeout=T)[:2] for _ in range(2))
    assert got == [("cleanup", 0), ("cleanup", 1)]
    with pytest.raises(RuntimeError):
        procs.spawn("after", Counter)


def test_bootstrap_runs_in_each_proc_before_actors() -> None:
    from _actors import EnvProbe, boot_async, boot_record_rank

    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=boot_record_rank)
    try:
        probe = procs.spawn("probe", EnvProbe)
        got = [v for v, _cwd in probe.probe.call("REGENCY_TEST_BOOT").get(timeout=T).values()]
        assert got == ["[('gpus', 0)]", "[('gpus', 1)]"]
    finally:
        procs.stop().get(timeout=T)
    procs = this_host().spawn_procs(per_host={"gpus": 1}, bootstrap=boot_async)
    try:
        probe = procs.spawn("probe", EnvProbe)
        assert probe.slice(gpus=0).probe.call_one("REGENCY_TEST_BOOT").get(timeout=T)[0] == "async"
    finally:
        procs.stop().get(timeout=T)


def test_bootstrap_failure_is_reported(unhandled_failures) -> None:
    from _actors import EnvProbe, boot_raise

    procs = this_host().spawn_procs(per_host={"gpus": 1}, bootstrap=boot_raise)
    try:
        with pytest.raises(Exception, match=r"proc rank 0 \{'gpus': 0\} of proc mesh 'anon' "
                                            r"\(.*\) failed to start: bootstrap raised"):
            procs.initialized.get(timeout=T)
        probe = procs.spawn("probe", EnvProbe)
        with pytest.raises(Exception, match="the proc failed to start: bootstrap raised"):
            probe.probe.call("X").get(timeout=T)
    finally:
        procs.stop().get(timeout=T)


def test_calls_after_proc_mesh_stop_fail_instead_of_hanging() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("after_proc_stop", Counter, 0)
    assert list(mesh.incr.call().get(timeout=T).values()) == [1, 1]
    procs.stop().get(timeout=T)
    with pytest.raises(SupervisionError):
        mesh.incr.call().get(timeout=T)
    with pytest.raises(SupervisionError):
        mesh.slice(gpus=0).incr.call_one().get(timeout=T)


def test_an_abstract_actor_fails_at_spawn_as_in_monarch(procs2, unhandled_failures) -> None:
    """``Actor`` is an ``ABC``: an abstract method left unimplemented is refused."""
    import abc

    assert isinstance(Complete(), abc.ABC)
    with pytest.raises(TypeError, match="abstract"):
        Incomplete()
    assert procs2.spawn("complete", Complete).run.call().get(timeout=T).values() == [42, 42]
    with pytest.raises(SupervisionError, match="Can't instantiate abstract class Incomplete"):
        procs2.spawn("incomplete", Incomplete).run.call().get(timeout=T)
    deadline = time.monotonic() + T  # both ranks' reports, before the next test begins
    while len([f for f in unhandled_failures() if "Incomplete" in f.report()]) < 2:
        assert time.monotonic() < deadline, unhandled_failures()
        time.sleep(0.01)


def test_actor_stops_itself(procs2) -> None:
    mesh = procs2.spawn("self_stop", Counter, 0)
    assert mesh.slice(gpus=1).stop_self.call_one().get(timeout=T) == "stopping"
    with pytest.raises(SupervisionError) as caught:  # Monarch's words, the rank, the reason
        mesh.slice(gpus=1).value.call_one().get(timeout=T)
    assert str(caught.value).startswith("Endpoint call self_stop.value() failed: rank 1 of mesh")
    assert "has status stopped: done with it" in str(caught.value)
    assert mesh.slice(gpus=0).incr.call_one().get(timeout=T) == 1  # other ranks keep working


def test_long_proc_mesh_names_work() -> None:
    """Mesh names are free text (Monarch: any name); a long one must not break the procs."""
    name = "experiment_2026_12_02_policy_rollout_workers_cluster_a_" * 2
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name=name)
    try:
        mesh = procs.spawn(name, Counter, 1)
        assert mesh.incr.call().get(timeout=T).get(0) == 2
    finally:
        procs.stop().get(timeout=T)


@pytest.mark.parametrize("name", ["with space", "a/b", "x@y:z", "ünïcode"])
def test_odd_mesh_names_work(name) -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name=name)
    try:
        assert procs.spawn(name, Counter, 1).incr.call().get(timeout=T).get(0) == 2
    finally:
        procs.stop().get(timeout=T)


def test_host_mesh_of_a_proc_spawns_procs(procs2) -> None:
    host = procs2.slice(gpus=1).host_mesh
    assert isinstance(host, HostMesh) and len(host) == 1
    more = host.spawn_procs(per_host={"extra": 2})
    try:
        assert list(more.spawn("extra", Counter, 1).incr.call().get(timeout=T).values()) == [2, 2]
    finally:
        more.stop().get(timeout=T)
    with pytest.raises(NotImplementedError):
        procs2.host_mesh  # noqa: B018 - more than one proc


def test_actor_mesh_stop_drains_messages_sent_before_it(procs2) -> None:
    mesh = procs2.spawn("drain", Counter, 0)
    futures = [mesh.incr.call() for _ in range(20)]
    stopped = mesh.stop()
    assert [list(f.get(timeout=T).values()) for f in futures] == [[i, i] for i in range(1, 21)]
    stopped.get(timeout=T)


def test_proc_mesh_stop_drains_messages_sent_before_it() -> None:
    port, recv = Channel.open()
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("drain_procs", Cleanup, port)
    futures = [mesh.ping.call() for _ in range(20)]
    procs.stop().get(timeout=T)
    assert all(list(f.get(timeout=T).values()) == [0] for f in futures)
    assert recv.recv().get(timeout=T) == ("cleanup", 0, "None", 20)


def test_a_proc_that_already_answered_does_not_fail_the_call_when_it_exits() -> None:
    """A call to two ranks: rank 0 answers, then its proc stops (gracefully); rank 1
    answers later. The call must succeed: rank 0's exit no longer matters to it.
    (With a whole-mesh stop() the procs exit one after the other, so this is what happens to
    calls still in flight when a proc mesh is stopped.)"""
    from _actors import Concurrent

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    pids = list(procs.spawn("gate_pids", Counter).pid.call().get(timeout=T).values())
    try:
        mesh = procs.spawn("gate", Concurrent)
        mesh.slice(gpus=0).release.call_one().get(timeout=T)
        fut = mesh.wait_for_release.call("x")  # rank 0 answers at once, rank 1 waits
        # per-sender FIFO: once this returns, rank 0's answer to the call is in
        assert "end x" in mesh.slice(gpus=0).get_log.call_one().get(timeout=T)
        procs.slice(gpus=0).stop().get(timeout=T)
        mesh.slice(gpus=1).release.call_one().get(timeout=T)
        assert list(fut.get(timeout=T).values()) == ["released x", "released x"]
    finally:
        procs.stop().get(timeout=T)
        _kill_if_alive(pids)  # see test_stop_of_a_proc_mesh_slice_then_of_the_whole_mesh


def _kill_if_alive(pids: list[int]) -> None:
    import psutil

    procs = [p for p in map(_proc_or_none, pids) if p is not None]
    for p in procs:
        p.kill()
    psutil.wait_procs(procs, timeout=5)


def test_stop_of_a_proc_mesh_slice_then_of_the_whole_mesh() -> None:
    """Stopping a slice of a proc mesh stops those procs only; stopping the whole mesh
    afterwards stops the rest (nothing may be left running)."""
    import psutil

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    pids = list(procs.spawn("slice_stop_pids", Counter).pid.call().get(timeout=T).values())
    try:
        procs.slice(gpus=0).stop().get(timeout=T)
        _gone, alive = psutil.wait_procs([p for p in [_proc_or_none(pids[0])] if p], timeout=5)
        assert not alive
        mesh = procs.slice(gpus=1).spawn("on_the_rest", Counter, 1)
        assert mesh.incr.call_one().get(timeout=T) == 2
        procs.stop().get(timeout=T)
        _gone, alive = psutil.wait_procs([p for p in [_proc_or_none(pids[1])] if p], timeout=5)
        assert not alive, "the rest of the proc mesh kept running after stop()"
    finally:
        _kill_if_alive(pids)


@pytest.mark.parametrize("stop", ["actor mesh", "proc mesh", "both"])
def test_an_owners_meshes_clean_up_before_it_and_their_calls_say_why(tmp_path, stop) -> None:
    """As in Monarch: what an actor spawned stops first. A mesh it handed out says, when
    called afterwards, that its proc was stopped because its owner stopped (it said the
    connection was lost)."""
    notes = tmp_path / "cleanups"
    procs = this_host().spawn_procs(per_host={"o": 1}, name="notingowner")
    owner = procs.spawn("owner", NotingOwner, str(notes), "owner")
    kids, local = owner.setup.call_one().get(timeout=T)
    assert kids.ok.call().get(timeout=T).values() == [1, 1]
    if stop == "actor mesh":
        owner.stop().get(timeout=T)
    elif stop == "proc mesh":
        procs.stop().get(timeout=T)
    else:  # both at once: the owner's stop still ends (its proc goes meanwhile)
        stopping = owner.stop()
        procs.stop().get(timeout=T)
        stopping.get(timeout=T)
    lines = notes.read_text().split()  # the kids' slow __cleanup__ was not cut short
    assert sorted(lines[:-1]) == ["kid", "kid", "local"] and lines[-1] == "owner", lines
    with pytest.raises(SupervisionError) as caught:
        kids.ok.call().get(timeout=T)
    assert "was stopped (its owner stopped)" in str(caught.value)
    with pytest.raises(SupervisionError, match="stopped"):
        local.ok.call().get(timeout=T)
    procs.stop().get(timeout=T)


@pytest.mark.parametrize("fanout", [16, 2])  # 4 members: sent one by one, or down a tree
def test_a_stop_completes_when_a_member_dies_meanwhile(tmp_path, fanout,
                                                       unhandled_failures) -> None:
    """A member whose proc is lost while it cleans up has nothing left to stop: the stop's
    Future completes once the others are done (down a relay tree it waited for ever)."""
    import os
    import signal

    from regency import config

    release = tmp_path / "release"
    procs = this_host().spawn_procs(per_host={"gpus": 4}, name="dying")
    try:
        with config.configured(max_cast_fanout=fanout):
            mesh = procs.spawn("holds", HoldsItsCleanup, str(release))
        pids = mesh.pid.call().get(timeout=T).values()
        stopping = mesh.stop()
        os.kill(pids[3], signal.SIGKILL)
        unhandled_failures.wait_for("SIGKILL", timeout=T)  # the death is known
        release.touch()
        stopping.get(timeout=T)
    finally:
        release.touch()
        procs.stop().get(timeout=T)
