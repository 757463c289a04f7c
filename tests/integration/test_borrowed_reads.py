"""Borrowed reads in a running system: a caller blocked in ``get()`` and an idle sync actor
read their connections themselves (see ``regency._transport._poller``).

What must hold: the fast path is taken for plain round trips; an actor busy in an endpoint
does not hold up the other actors of its proc; a timed-out ``get()`` keeps its result; and
with ``borrow_reads`` off, everything works the usual way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from _borrow_actors import AsyncEcho, Gate

from regency import config
from regency._api._bootstrap import runtime
from regency._runtime._borrow import thread_waker
from regency.actor import this_host
from regency.config import configured

pytestmark = pytest.mark.timeout(120)
T = 20


@pytest.fixture(scope="module")
def gates() -> Iterator[tuple[Any, Any]]:
    """Two sync actors in one proc."""
    procs = this_host().spawn_procs(per_host={"p": 1}, name="borrow")
    try:
        yield procs.spawn("g1", Gate), procs.spawn("g2", Gate)
    finally:
        procs.stop().get(timeout=T)


def _taken_here() -> int:
    return sum(c.taken for c in list(runtime().router.connections))


def test_round_trips_are_read_by_the_waiting_threads(gates: tuple[Any, Any]) -> None:
    if not config.get("borrow_reads"):
        pytest.skip("borrow_reads is off in this environment (REGENCY_BORROW_READS)")
    g1, _ = gates
    g1.echo.call_one(0).get(timeout=T)
    here, there = _taken_here(), g1.taken.call_one().get(timeout=T)
    assert [g1.echo.call_one(i).get(timeout=T) for i in range(100)] == list(range(100))
    # most replies were read by this thread, most calls by the actor's own (not all: a
    # thread that is slow to start waiting finds its message read by the loop already)
    assert _taken_here() - here >= 50
    assert g1.taken.call_one().get(timeout=T) - there >= 50


def test_a_busy_actor_does_not_hold_up_its_neighbours(gates: tuple[Any, Any]) -> None:
    g1, g2 = gates
    waiting = g1.wait.call_one("busy")  # g1's thread read this call itself, then runs it
    assert g2.open.call_one("busy").get(timeout=T) == "open"
    assert waiting.get(timeout=T) == "opened"


def test_two_actors_of_one_proc_answer_in_turn(gates: tuple[Any, Any]) -> None:
    g1, g2 = gates
    for i in range(100):
        assert g1.echo.call_one(("g1", i)).get(timeout=T) == ("g1", i)
        assert g2.echo.call_one(("g2", i)).get(timeout=T) == ("g2", i)
    futures = [(g, i, g.echo.call_one(i)) for i in range(50) for g in (g1, g2)]
    assert all(f.get(timeout=T) == i for _, i, f in futures)


def test_an_idle_sync_actor_leaves_its_neighbours_calls_to_the_loop() -> None:
    # an idle sync actor reads the connection its last call came on; finding a call for an
    # async actor of its proc there, it must stop reading it, or every such call would pass
    # through its thread on the way to the loop (three times the latency, four the CPU)
    if not config.get("borrow_reads"):
        pytest.skip("borrow_reads is off in this environment (REGENCY_BORROW_READS)")
    procs = this_host().spawn_procs(per_host={"p": 1}, name="neighbours")
    try:
        gate, echo = procs.spawn("gate", Gate), procs.spawn("echo", AsyncEcho)
        before = gate.handed_back.call_one().get(timeout=T)  # gate's thread now reads idle
        assert [echo.echo.call_one(i).get(timeout=T) for i in range(100)] == list(range(100))
        # one call read and given back, then no more (without the fix: nearly all 100)
        assert gate.handed_back.call_one().get(timeout=T) - before <= 5
        # a call for the sync actor itself brings its thread back to reading
        here = gate.taken.call_one().get(timeout=T)
        assert [gate.echo.call_one(i).get(timeout=T) for i in range(100)] == list(range(100))
        assert gate.taken.call_one().get(timeout=T) - here >= 50
    finally:
        procs.stop().get(timeout=T)


def test_a_timed_out_get_keeps_its_result(gates: tuple[Any, Any]) -> None:
    g1, g2 = gates
    waiting = g1.wait.call_one("later")
    with pytest.raises(TimeoutError, match="g1"):
        waiting.get(timeout=0.05)
    g2.open.call_one("later").get(timeout=T)
    assert waiting.get(timeout=T) == "opened"


def test_without_borrowed_reads_calls_go_through_the_loop() -> None:
    with configured(borrow_reads=False):
        procs = this_host().spawn_procs(per_host={"p": 1}, name="unborrowed")
    try:
        g = procs.spawn("plain", Gate)
        assert g.polled.call_one().get(timeout=T) is False
        assert [g.echo.call_one(i).get(timeout=T) for i in range(20)] == list(range(20))
        assert g.taken.call_one().get(timeout=T) == 0
    finally:
        procs.stop().get(timeout=T)


def test_threads_waiting_on_one_future_all_get_it(gates: tuple[Any, Any]) -> None:
    import threading

    g1, g2 = gates
    waiting = g1.wait.call_one("shared")
    got: list[str] = []
    threads = [threading.Thread(target=lambda: got.append(waiting.get(timeout=T)))
               for _ in range(3)]
    for t in threads:
        t.start()
    g2.open.call_one("shared").get(timeout=T)
    for t in threads:
        t.join(T)
    assert got == ["opened"] * 3


def test_a_reply_read_by_its_waiting_thread_does_not_wake_that_thread(
        gates: tuple[Any, Any]) -> None:
    """The thread that reads and handles its own reply is not woken for it afterwards: a
    stale wake would end its next wait at once, for nothing (a wasted borrow per call)."""
    if not config.get("borrow_reads"):
        pytest.skip("borrow_reads is off in this environment (REGENCY_BORROW_READS)")
    g1, _ = gates
    g1.echo.call_one(0).get(timeout=T)
    waker = thread_waker()
    stale = 0
    here = _taken_here()
    for i in range(50):
        assert g1.echo.call_one(i).get(timeout=T) == i
        try:
            os.eventfd_read(waker.fd)
            stale += 1
        except BlockingIOError:
            pass
    read_by_the_loop = 50 - (_taken_here() - here)
    # a reply the loop reads and completes while this thread is about to wait still wakes
    # it (often on a busy machine); one this thread read itself never does. Before the fix,
    # every reply this thread read woke it.
    assert stale <= read_by_the_loop


_AWAIT_AFTER_GET = r"""
import asyncio, sys, threading
sys.path.insert(0, sys.argv[1])
from _borrow_actors import AsyncEcho, Gate
from regency.actor import this_host

procs = this_host().spawn_procs(per_host={"p": 1}, name="linger")
g = procs.spawn("g", Gate)
assert g.echo.call_one(1).get(timeout=30) == 1  # read here: its connection lingers, paused

async def main():  # only the loop can complete an await: the linger must end for it
    return await asyncio.wait_for(g.echo.call_one(2), 30)

assert asyncio.run(main()) == 2
assert g.echo.call_one(3).get(timeout=30) == 3
called = threading.Event()
g.echo.call_one(4).add_callback(lambda f: called.set())  # so must a callback's
assert called.wait(30)
procs.stop().get(timeout=30)
print("ok")
"""


def test_an_await_or_a_callback_after_a_get_is_not_kept_waiting_by_the_linger() -> None:
    """A ``get()`` leaves its connection paused for the next one (ADR 0032); an ``await`` or
    a callback, which the loop completes, ends that at once. With a linger of an hour, a
    wait that depended on the sweep would time out."""
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    env = {**os.environ, "REGENCY_BORROW_LINGER": "3600"}
    done = subprocess.run([sys.executable, "-c", _AWAIT_AFTER_GET, str(here)], env=env,
                          capture_output=True, text=True, timeout=100, check=False)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
