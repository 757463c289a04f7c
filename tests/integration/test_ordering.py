"""Per-sender FIFO: whatever path a message takes (full-mesh broadcast or call, cast to a slice,
point call), one sender's messages reach each actor in send order."""

from __future__ import annotations

import pytest

from _actors import (
    AsyncOrderingDriver,
    AsyncRecorder,
    OrderingDriver,
    Recorder,
    expected_per_rank,
    ordering_plan,
    run_ordering_plan,
)
from regency.actor import this_host, this_proc

T = 30
N = 4
MESSAGES = 300


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"gpus": N}, name="ordering")
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(params=[Recorder, AsyncRecorder], ids=["sync", "async"])
def recorders(request, procs):
    mesh = procs.spawn(f"rec_{request.param.__name__}", request.param)
    yield mesh
    mesh.stop().get(timeout=T)


def _check(recorders, sender: str, plan) -> None:
    expected = expected_per_rank(N, plan)
    seen = list(recorders.get_seen.call().get(timeout=T).values())
    for rank in range(N):
        got = seen[rank].get(sender, [])
        assert got == expected[rank], (
            f"rank {rank}: {len(got)} messages, first difference at "
            f"{next((i for i, (a, b) in enumerate(zip(got, expected[rank])) if a != b), None)}"
        )


@pytest.mark.parametrize("seed", [1, 2])
def test_controller_sender_order(recorders, seed) -> None:
    plan = ordering_plan(N, MESSAGES, seed)
    futures = run_ordering_plan(recorders, "controller", plan)
    for f in futures:
        f.get(timeout=T)
    _check(recorders, "controller", plan)


def test_controller_sender_order_checked_without_waiting(recorders) -> None:
    """No reply is awaited before the final check: the check itself queues behind."""
    plan = ordering_plan(N, MESSAGES, 3)
    run_ordering_plan(recorders, "controller", plan)  # futures dropped
    _check(recorders, "controller", plan)


@pytest.mark.parametrize("driver_cls", [OrderingDriver, AsyncOrderingDriver],
                         ids=["sync-driver", "async-driver"])
def test_actor_sender_order(recorders, procs, driver_cls) -> None:
    plan = ordering_plan(N, MESSAGES, 4)
    driver = procs.slice(gpus=0).spawn(f"drv_{driver_cls.__name__}", driver_cls)
    sender = driver.drive.call_one(recorders, plan).get(timeout=T)
    _check(recorders, sender, plan)


def test_two_senders_each_keep_their_order(recorders, procs) -> None:
    """An actor and the controller send at the same time; each sender's order holds."""
    plan_a = ordering_plan(N, 200, 5)
    plan_b = ordering_plan(N, 200, 6)
    driver = procs.slice(gpus=3).spawn("drv_two", OrderingDriver)
    fut = driver.drive.call_one(recorders, plan_a)
    futures = run_ordering_plan(recorders, "controller", plan_b)
    sender = fut.get(timeout=T)
    for f in futures:
        f.get(timeout=T)
    _check(recorders, sender, plan_a)
    _check(recorders, "controller", plan_b)


def test_actor_in_controller_process_as_sender(recorders) -> None:
    plan = ordering_plan(N, 200, 7)
    driver = this_proc().spawn("drv_local", OrderingDriver)
    sender = driver.drive.call_one(recorders, plan).get(timeout=T)
    _check(recorders, sender, plan)
    driver.stop().get(timeout=T)


# -- through a multicast relay tree ------------------------------------------------------------
@pytest.fixture
def tree_recorders():
    """8 recorders with a cast fan-out of 2: casts travel down a relay tree (depth 3), while
    point calls go straight to their actor, which is how a point call could overtake a cast."""
    from regency.config import configured

    with configured(max_cast_fanout=2):
        procs = this_host().spawn_procs(per_host={"gpus": 8}, name="tree")
        try:
            yield procs, procs.spawn("tree_rec", Recorder)
        finally:
            procs.stop().get(timeout=T)


def _check_n(recorders, sender: str, plan, n: int) -> None:
    expected = expected_per_rank(n, plan)
    seen = list(recorders.get_seen.call().get(timeout=T).values())
    for rank in range(n):
        assert seen[rank].get(sender, []) == expected[rank], f"rank {rank} out of order"


def test_order_through_a_relay_tree_from_the_controller(tree_recorders) -> None:
    from regency.config import configured

    _procs, recorders = tree_recorders
    plan = ordering_plan(8, MESSAGES, 8)
    with configured(max_cast_fanout=2):
        for f in run_ordering_plan(recorders, "controller", plan):
            f.get(timeout=T)
        _check_n(recorders, "controller", plan, 8)


def test_order_through_a_relay_tree_from_an_actor(tree_recorders) -> None:
    from regency.config import configured

    procs, recorders = tree_recorders
    plan = ordering_plan(8, MESSAGES, 9)
    with configured(max_cast_fanout=2):
        driver = procs.slice(gpus=5).spawn("tree_driver", OrderingDriver)
        sender = driver.drive.call_one(recorders, plan).get(timeout=T)
        _check_n(recorders, sender, plan, 8)
