"""Names issue 18 added to match Monarch, with real procs: Instance.kill, PortReceiver.ranked,
HostMesh.region / stream_logs / is_fake_in_process, returns_future over endpoint calls."""

from __future__ import annotations

import asyncio

import pytest
from _surface_actors import Killable

from regency import config
from regency.actor import Channel, SupervisionError, returns_future, send, this_host

T = 30


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="surface")
    yield procs
    procs.stop().get(timeout=T)


def test_instance_kill_fails_the_actor_and_tells_its_owner(procs, unhandled_failures) -> None:
    mesh = procs.spawn("killable", Killable)
    victim = mesh.slice(gpus=1)
    try:  # the message's code finishes; its reply may lose the race with the failure
        assert victim.kill_me.call_one("enough").get(timeout=T) == "finished the message first"
    except SupervisionError as exc:
        assert "explicitly aborted due to: enough" in str(exc)
    failures = unhandled_failures.wait_for("explicitly aborted due to: enough")
    assert "killable" in failures[0].mesh_name
    with pytest.raises(SupervisionError, match="explicitly aborted due to: enough"):
        victim.ping.call_one().get(timeout=T)
    assert mesh.slice(gpus=0).ping.call_one().get(timeout=T) == "pong"


def test_port_receiver_ranked(procs) -> None:
    mesh = procs.spawn("ranked", Killable)
    port, receiver = Channel.open()
    ranked = receiver.ranked()
    send(mesh.ping, (), {}, port=port)
    got = sorted([ranked.recv().get(timeout=T), ranked.recv().get(timeout=T)])
    assert got == [(0, "pong"), (1, "pong")]
    send(mesh.slice(gpus=1).ping, (), {}, port=port)
    assert receiver.recv().get(timeout=T) == "pong"  # the plain receiver still takes values


def test_host_mesh_members() -> None:
    host = this_host()
    assert host.region.labels == () and len(host.region) == 1
    assert host.is_fake_in_process is False
    assert host.stream_logs is config.get("enable_log_forwarding")
    with config.configured(enable_log_forwarding=False):
        assert this_host().stream_logs is False


def test_returns_future_over_endpoint_calls(procs) -> None:
    mesh = procs.spawn("rf", Killable)

    @returns_future
    async def pongs() -> list[str]:
        return list((await mesh.ping.call()).values())

    assert pongs().get(timeout=T) == ["pong", "pong"]

    async def from_a_loop() -> list[str]:
        return await pongs()

    assert asyncio.run(from_a_loop()) == ["pong", "pong"]
