"""Casts to large meshes travel down a relay tree; per-sender order still holds (64 procs)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest
from _tree_actors import LoopHog, Recorder

from regency import config
from regency.actor import ActorMesh, this_host

pytestmark = pytest.mark.timeout(120)
T = 60
FANOUT = 4


@pytest.fixture(scope="module")
def big() -> Iterator[ActorMesh]:
    with config.configured(max_cast_fanout=FANOUT):
        procs = this_host().spawn_procs(per_host={"hosts": 8, "gpus": 8})
        mesh = procs.spawn("tree", Recorder)
        try:
            yield mesh
        finally:
            procs.stop().get(timeout=T)


def test_sender_writes_only_to_the_first_relays(big: ActorMesh) -> None:
    route = big._route
    assert len(route.ranks) == 64
    assert len(route.hops) == FANOUT  # O(fan-out) sends, not O(members)
    pids = big.note.call(-1).get(timeout=T)
    assert len(set(pids.values())) == 64


def test_order_holds_across_casts_slices_and_point_calls(big: ActorMesh) -> None:
    before = {p["hosts"] * 8 + p["gpus"]: len(v) for p, v in big.log.call().get(timeout=T).items()}
    rng = random.Random(7)
    expect: dict[int, list[int]] = {r: [] for r in range(64)}
    for seq in range(400):
        k = rng.random()
        if k < 0.25:
            big.note.broadcast(seq)
            targets = range(64)
        elif k < 0.5:
            h = rng.randrange(8)
            big.slice(hosts=h).note.broadcast(seq)
            targets = range(h * 8, h * 8 + 8)
        elif k < 0.6:
            g = rng.randrange(8)
            big.slice(gpus=g).note.call(seq)  # a strided slice, with replies
            targets = range(g, 64, 8)
        else:
            r = rng.randrange(64)
            big.slice(hosts=r // 8, gpus=r % 8).note.call_one(seq)
            targets = range(r, r + 1)
        for t in targets:
            expect[t].append(seq)
    logs = big.log.call().get(timeout=T)
    for point, seen in logs.items():
        rank = point["hosts"] * 8 + point["gpus"]
        assert seen[before[rank]:] == expect[rank], f"rank {rank} saw messages out of order"


def test_order_holds_when_an_actor_is_the_sender(big: ActorMesh) -> None:
    sender = big.slice(hosts=0, gpus=0)
    before = len(big.slice(hosts=7, gpus=7).log.call_one().get(timeout=T))
    for i in range(50):
        sender.relay_to.call_one(big, 1000 + i).get(timeout=T)
    # asked through the sender: its casts are fire-and-forget, and the controller's own
    # calls are not ordered with them
    seen = sender.log_of.call_one(big.slice(hosts=7, gpus=7)).get(timeout=T)[before:]
    assert seen == [1000 + i for i in range(50)]


def test_stop_right_after_casts_is_ordered_behind_them(tmp_path) -> None:
    """A stop travels the same tree as the casts before it, so none of them is refused, even
    while the relays are slow to forward (their loops held by another actor)."""
    with config.configured(max_cast_fanout=FANOUT):
        procs = this_host().spawn_procs(per_host={"hosts": 4, "gpus": 8}, name="stoptree")
    try:
        hogs = procs.spawn("hog", LoopHog)
        hogs.initialized.get(timeout=T)
        for whole in (False, True):
            mesh = procs.spawn("tree", Recorder)
            mesh.initialized.get(timeout=T)
            target = mesh if whole else mesh.slice(hosts=1)
            started = tmp_path / str(whole)
            started.mkdir()
            hogs.hog.broadcast(1.0, str(started))
            deadline = time.monotonic() + T
            while len(list(started.iterdir())) < len(hogs):  # every loop is held now
                assert time.monotonic() < deadline, "the loop hogs did not start"
                time.sleep(0.005)  # polling for the files, not waiting a guessed time
            calls = [target.note.call(i) for i in range(10)]
            target.stop().get(timeout=T)
            for c in calls:
                assert len(c.get(timeout=T)) == len(target)
    finally:
        procs.stop().get(timeout=T)
