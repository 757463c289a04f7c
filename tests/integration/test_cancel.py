"""``Future.cancel()``: the caller's wait ends with ``CancelledError`` and the members stop
the call as far as Python allows (``_api/_cancel.py``, ADR 0036): a queued call is skipped,
an async endpoint gets ``asyncio.CancelledError`` at its ``await``, a running sync endpoint
runs to its end; the actor goes on with its next message."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from typing import Any

import pytest
from _cancel_actors import Blocker, Opener, Sleeper

from regency import config
from regency._api import _failfast
from regency.actor import ActorError, context, this_host

T = 30
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def procs() -> Iterator[Any]:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="cancel")
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(scope="module")
def sleeper(procs: Any) -> Any:
    return procs.slice(gpus=0).spawn("sleeper", Sleeper)


@pytest.fixture(scope="module")
def openers(procs: Any) -> Any:
    """One ``Opener`` per proc: reads its proc's log while the other actors are busy."""
    return procs.spawn("openers", Opener)


@pytest.fixture(scope="module")
def watch(openers: Any) -> Callable[[], list[str]]:
    """The log of the sleeper's proc."""
    return log_of(openers.slice(gpus=0))


def until_logged(history: Callable[[], list[str]], *lines: str) -> list[str]:
    """The proc's log, once it has all ``lines`` (polled: the event is in another process)."""
    deadline = time.monotonic() + T
    while True:
        log = history()
        if all(line in log for line in lines):
            return log
        assert time.monotonic() < deadline, f"never logged {lines}: {log}"
        time.sleep(0.01)


def log_of(actor: Any) -> Callable[[], list[str]]:
    return lambda: actor.history.call_one().get(timeout=T)


def test_a_running_async_endpoint_is_cancelled_and_the_actor_goes_on(
        sleeper: Any, watch: Any) -> None:
    fut = sleeper.nap.call_one("a1")
    until_logged(watch, "a1 started")
    assert fut.cancel() is True
    assert fut.cancelled() and fut.done()
    assert fut.cancel() is True  # as Python's futures: cancelled already
    with pytest.raises(CancelledError, match=r"nap\(\) was cancelled"):
        fut.get(timeout=T)
    assert sleeper.record.call_one("a1 next").get(timeout=T) == "a1 next"
    log = watch()
    assert log.index("a1 cancelled") < log.index("a1 ended") < log.index("a1 next")


def test_cancel_of_a_done_future_is_false_and_changes_nothing(sleeper: Any) -> None:
    fut = sleeper.record.call_one("b1")
    assert fut.get(timeout=T) == "b1"
    assert fut.cancel() is False
    assert not fut.cancelled()
    assert fut.get(timeout=T) == "b1"


def test_a_queued_call_is_skipped(sleeper: Any, watch: Any) -> None:
    running = sleeper.nap.call_one("c1")
    queued = sleeper.record.call_one("c1 queued")  # behind nap: the actor is serial
    until_logged(watch, "c1 started")
    assert queued.cancel() and running.cancel()
    assert sleeper.record.call_one("c1 after").get(timeout=T) == "c1 after"
    log = watch()
    assert "c1 queued" not in log
    assert log.index("c1 cancelled") < log.index("c1 after")


def test_a_handler_that_catches_the_cancel_runs_on_and_timeouts_still_work(
        sleeper: Any, watch: Any) -> None:
    fut = sleeper.stubborn.call_one("d1")
    until_logged(watch, "d1 started")
    assert fut.cancel()
    with pytest.raises(CancelledError):
        fut.get(timeout=T)  # its reply, when it comes, is dropped
    until_logged(watch, "d1 ignored the cancel")
    # the actor's task took the cancellation back: its own timeouts are timeouts
    assert sleeper.timed.call_one().get(timeout=T) == "timed out"


def test_a_concurrent_body_is_cancelled(sleeper: Any, watch: Any) -> None:
    fut = sleeper.body.call_one("e1")
    until_logged(watch, "e1 started")
    assert fut.cancel()
    until_logged(watch, "e1 cancelled")
    assert sleeper.record.call_one("e1 next").get(timeout=T) == "e1 next"


def test_a_call_to_a_whole_mesh_is_cancelled_on_every_member(procs: Any, openers: Any) -> None:
    mesh = procs.spawn("sleepers", Sleeper)
    fut = mesh.nap.call("f1")
    for g in (0, 1):  # each proc has its own log
        until_logged(log_of(openers.slice(gpus=g)), "f1 started")
    assert fut.cancel()
    with pytest.raises(CancelledError):
        fut.get(timeout=T)
    for g in (0, 1):
        until_logged(log_of(openers.slice(gpus=g)), "f1 cancelled")
    assert list(mesh.record.call("f1 next").get(timeout=T).values()) == ["f1 next"] * 2


def test_a_running_sync_endpoint_runs_to_its_end_and_its_queue_is_skipped(
        procs: Any, openers: Any) -> None:
    blocker, opener = procs.slice(gpus=1).spawn("blocker", Blocker), openers.slice(gpus=1)
    running = blocker.block.call_one("g1")
    queued = blocker.record.call_one("g1 queued")
    until_logged(log_of(opener), "g1 started")
    assert running.cancel() and queued.cancel()
    with pytest.raises(CancelledError):
        running.get(timeout=T)
    opener.open.call_one("g1").get(timeout=T)
    assert blocker.record.call_one("g1 after").get(timeout=T) == "g1 after"
    log = log_of(opener)()
    assert log.index("g1 started") < log.index("g1 ended") < log.index("g1 after")
    assert "g1 queued" not in log


def test_a_sync_endpoint_can_see_that_its_call_was_cancelled(procs: Any, openers: Any) -> None:
    blocker, opener = procs.slice(gpus=1).spawn("looker", Blocker), openers.slice(gpus=1)
    fut = blocker.until_cancelled.call_one("l1", 60)
    until_logged(log_of(opener), "l1 started")
    assert fut.cancel()
    until_logged(log_of(opener), "l1 noticed")
    # the next message of the same endpoint (the same context object, reused) is not
    assert blocker.until_cancelled.call_one("l2", 0.05).get(timeout=T) == "not cancelled"
    assert context().cancelled is False  # outside any endpoint


def test_await_of_a_cancelled_call_raises_cancelled_error(sleeper: Any, watch: Any) -> None:
    async def main() -> None:
        fut = sleeper.nap.call_one("h1")
        await asyncio.to_thread(until_logged, watch, "h1 started")
        assert fut.cancel()
        with pytest.raises(CancelledError):
            await fut

    asyncio.run(asyncio.wait_for(main(), T))
    until_logged(watch, "h1 cancelled")


def test_cancelling_an_endpoint_cancels_the_call_it_awaits(procs: Any, sleeper: Any,
                                                          watch: Any) -> None:
    relay = procs.slice(gpus=1).spawn("relay", Sleeper)
    fut = relay.relay.call_one(sleeper, "n1")
    until_logged(watch, "n1 started")  # the nested call runs on the sleeper
    assert fut.cancel()
    until_logged(watch, "n1 cancelled")
    assert relay.record.call_one("n2").get(timeout=T) == "n2"  # the relay goes on


def test_a_cancelled_task_awaiting_a_call_cancels_the_call(sleeper: Any, watch: Any) -> None:
    async def main() -> None:
        task = asyncio.ensure_future(sleeper.nap.call_one("n3"))
        await asyncio.to_thread(until_logged, watch, "n3 started")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(main(), T))
    until_logged(watch, "n3 cancelled")


def test_wait_for_timing_out_on_a_calls_asyncio_future_cancels_the_call(
        sleeper: Any, watch: Any) -> None:
    async def main() -> None:
        fut = sleeper.nap.call_one("n4")
        await asyncio.to_thread(until_logged, watch, "n4 started")
        with pytest.raises((TimeoutError, asyncio.TimeoutError)):
            await asyncio.wait_for(fut.as_asyncio(), 0.001)
        assert fut.cancelled()

    asyncio.run(asyncio.wait_for(main(), T))
    until_logged(watch, "n4 cancelled")


def test_cancel_from_another_thread_ends_a_blocked_get(sleeper: Any, watch: Any) -> None:
    fut = sleeper.nap.call_one("i1")
    got: list[BaseException] = []
    blocked = threading.Event()

    def wait() -> None:
        blocked.set()
        try:
            fut.get(timeout=T)
        except BaseException as exc:  # noqa: BLE001 - what it raised is the finding
            got.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    blocked.wait(T)
    until_logged(watch, "i1 started")
    assert fut.cancel()
    waiter.join(T)
    assert not waiter.is_alive()
    assert len(got) == 1 and isinstance(got[0], CancelledError)


@pytest.mark.parametrize("wait", ["get", "exception"])
def test_ctrl_c_in_a_blocked_get_cancels_the_call(sleeper: Any, watch: Any, wait: str) -> None:
    """A notebook's interrupted cell: the ``KeyboardInterrupt`` propagates (``exception()``
    returned it as the call's), and the call no longer holds the actor for the next cell
    (Monarch's runs on)."""
    tag = f"j-{wait}"
    fut = sleeper.nap.call_one(tag)
    main = threading.main_thread()
    assert threading.current_thread() is main

    def press() -> None:  # Ctrl-C, once the nap runs and the main thread waits for it
        until_logged(watch, f"{tag} started")
        deadline = time.monotonic() + T
        while _failfast.waiting is not fut._completion:  # noqa: SLF001 - set before it blocks
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert main.ident is not None
        signal.pthread_kill(main.ident, signal.SIGINT)

    presser = threading.Thread(target=press, daemon=True)
    presser.start()
    with pytest.raises(KeyboardInterrupt):
        getattr(fut, wait)(timeout=T)
    presser.join(T)
    assert fut.cancelled()
    assert sleeper.record.call_one(f"{tag} next").get(timeout=T) == f"{tag} next"
    log = watch()
    assert log.index(f"{tag} cancelled") < log.index(f"{tag} next")


def test_an_actor_cancels_a_call_it_made(procs: Any, sleeper: Any, openers: Any,
                                         watch: Any) -> None:
    caller = procs.slice(gpus=1).spawn("canceller", Sleeper)
    watcher = openers.slice(gpus=0)
    assert caller.cancel_peers_nap.call_one(sleeper, watcher, "j1").get(timeout=T) == "cancelled"
    until_logged(watch, "j1 cancelled")


def test_a_task_shared_with_a_cancelled_call_fails_the_next_call_not_the_actor(
        procs: Any, watch: Any) -> None:
    sharer = procs.slice(gpus=0).spawn("sharer", Sleeper)
    first = sharer.shared.call_one("m1")
    until_logged(watch, "m1 started")
    assert first.cancel()  # the shared task is cancelled with it (asyncio's rule)
    with pytest.raises(ActorError) as info:  # an error of this call: the actor lives on
        sharer.shared.call_one("m2").get(timeout=T)
    assert isinstance(info.value.exception, asyncio.CancelledError)
    assert sharer.record.call_one("m3").get(timeout=T) == "m3"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 keeps no count of cancels")
def test_a_cancelled_error_nobody_asked_for_fails_the_call_not_the_actor(procs: Any) -> None:
    raiser = procs.slice(gpus=0).spawn("raiser", Sleeper)
    with pytest.raises(ActorError) as info:
        raiser.raise_cancelled.call_one().get(timeout=T)
    assert isinstance(info.value.exception, asyncio.CancelledError)
    assert raiser.record.call_one("r1").get(timeout=T) == "r1"


def test_a_cancel_reaches_a_call_of_an_actor_being_stopped(procs: Any, watch: Any) -> None:
    doomed = procs.slice(gpus=0).spawn("doomed", Sleeper)
    fut = doomed.nap.call_one("n1")
    until_logged(watch, "n1 started")
    stopping = doomed.stop()  # waits for the running call, unless it is cancelled
    assert fut.cancel()
    stopping.get(timeout=T)
    until_logged(watch, "n1 cancelled")


def test_many_queued_calls_cancelled_are_all_skipped(procs: Any, openers: Any) -> None:
    blocker, opener = procs.slice(gpus=1).spawn("many", Blocker), openers.slice(gpus=1)
    running = blocker.block.call_one("o1")
    until_logged(log_of(opener), "o1 started")
    queued = [blocker.record.call_one(f"o1 q{i}") for i in range(600)]
    assert all(f.cancel() for f in queued)
    # the cancels travel ahead of the call that opens the gate, on the same connection
    opener.open.call_one("o1").get(timeout=T)
    assert running.get(timeout=T) == "o1"
    assert blocker.record.call_one("o1 after").get(timeout=T) == "o1 after"
    assert not [line for line in log_of(opener)() if line.startswith("o1 q")]


def test_choose_can_be_cancelled(procs: Any, openers: Any) -> None:
    mesh = procs.spawn("chosen", Sleeper)
    fut = mesh.nap.choose("p1")
    deadline = time.monotonic() + T
    while not any("p1 started" in log_of(openers.slice(gpus=g))() for g in (0, 1)):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert fut.cancel()
    deadline = time.monotonic() + T
    while not any("p1 cancelled" in log_of(openers.slice(gpus=g))() for g in (0, 1)):
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_cast_relayed_down_a_tree_is_cancelled_on_every_member() -> None:
    with config.configured(max_cast_fanout=1):  # 3 members: the cast is relayed
        procs = this_host().spawn_procs(per_host={"gpus": 3}, name="relayed")
        try:
            mesh, openers = procs.spawn("relayed", Sleeper), procs.spawn("logs", Opener)
            running, queued = mesh.nap.call("q1"), mesh.record.call("q1 queued")
            for g in range(3):
                until_logged(log_of(openers.slice(gpus=g)), "q1 started")
            assert queued.cancel() and running.cancel()
            assert list(mesh.record.call("q1 after").get(timeout=T).values()) == ["q1 after"] * 3
            for g in range(3):
                log = log_of(openers.slice(gpus=g))()
                assert "q1 cancelled" in log and "q1 queued" not in log
        finally:
            procs.stop().get(timeout=T)


def test_a_stream_is_cancelled_for_the_members_that_have_not_answered(
        procs: Any, openers: Any) -> None:
    mesh = procs.spawn("streamers", Sleeper)
    stream = mesh.nap_but_rank_0.stream("s1")
    assert type(stream).__name__ == "ValueStream"  # as Monarch's
    first, second = stream
    assert first.get(timeout=T) == "s1 at once"
    until_logged(log_of(openers.slice(gpus=1)), "s1 started")
    assert stream.cancel()
    with pytest.raises(CancelledError):
        second.get(timeout=T)
    assert second.cancelled() and second.cancel()  # as a call's future cancelled
    assert not first.cancelled() and first.cancel() is False
    assert first.get(timeout=T) == "s1 at once"  # a reply in stays
    until_logged(log_of(openers.slice(gpus=1)), "s1 cancelled")
    assert stream.cancel() is False  # nothing left to cancel
    assert list(mesh.record.call("s1 next").get(timeout=T).values()) == ["s1 next"] * 2


def test_a_stream_answered_in_full_is_not_cancelled(sleeper: Any) -> None:
    stream = sleeper.record.stream("s2")
    assert [f.get(timeout=T) for f in stream] == ["s2"]
    assert next(stream, None) is None
    assert stream.cancel() is False


def test_futures_that_are_not_of_one_call_are_not_cancelled(procs: Any, sleeper: Any) -> None:
    streamed = list(sleeper.record.stream("k1"))
    assert streamed[0].cancel() is False  # one of a stream's: ``ValueStream.cancel`` is
    assert streamed[0].get(timeout=T) == "k1"
    extra = procs.spawn("stopped", Sleeper)
    stopping = extra.stop()
    assert stopping.cancel() is False
    stopping.get(timeout=T)
