"""Completion (thread-safe result cell) and Future semantics."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from regency._api._future import Future, completed, failed
from regency._runtime import _completion
from regency._runtime._completion import Completion


def test_future_cannot_be_constructed_directly() -> None:
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        Future()


def test_timeout_does_not_consume_the_result() -> None:
    c = Completion("the answer")
    fut: Future[int] = Future._from(c)
    with pytest.raises(TimeoutError, match="still waiting for the answer"):
        fut.get(timeout=0.01)
    c.set_result(42)
    assert fut.get() == 42
    assert fut.get(timeout=0) == 42
    assert fut.result() == 42
    assert fut.exception() is None


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_timeouts_are_rejected(bad: float) -> None:
    fut: Future[int] = Future._from(Completion())
    with pytest.raises(ValueError, match="timeout"):
        fut.get(timeout=bad)


def test_exception_is_raised_each_time_and_returned_by_exception() -> None:
    fut = failed(KeyError("k"))
    for _ in range(2):
        with pytest.raises(KeyError):
            fut.get()
    assert isinstance(fut.exception(), KeyError)


def test_set_twice_keeps_the_first() -> None:
    c = Completion()
    assert c.set_result(1)
    assert not c.set_result(2)
    assert not c.set_exception(RuntimeError())
    assert c.outcome() == 1


def test_completed_from_another_thread_wakes_a_waiter() -> None:
    c = Completion()
    t = threading.Timer(0.01, c.set_result, ("late",))
    t.start()
    assert Future._from(c).get(timeout=5) == "late"
    t.join()


def test_await_from_asyncio_run_and_twice() -> None:
    c = Completion()

    async def main() -> tuple[int, int]:
        fut: Future[int] = Future._from(c)
        threading.Timer(0.01, c.set_result, (7,)).start()
        return await fut, await fut

    assert asyncio.run(main()) == (7, 7)


def test_await_without_a_loop_is_an_error() -> None:
    fut: Future[int] = Future._from(Completion())
    with pytest.raises(ValueError, match="no active event loop"):
        fut.__await__().send(None)


def test_as_asyncio_for_gather() -> None:
    async def main() -> list[int]:
        return await asyncio.gather(completed(1).as_asyncio(), completed(2).as_asyncio())

    assert asyncio.run(main()) == [1, 2]


def test_get_inside_a_running_loop_warns() -> None:
    async def main() -> int:
        with pytest.warns(UserWarning, match="active event loop"):
            fut: Future[int] = Future._from(Completion())
            c = fut._completion
            threading.Timer(0.01, c.set_result, (3,)).start()
            return fut.get(timeout=5)

    assert asyncio.run(main()) == 3


def test_callbacks_run_once_whatever_the_order() -> None:
    seen: list[int] = []
    c = Completion()
    c.add_done_callback(lambda _: seen.append(1))
    c.set_result(None)
    c.add_done_callback(lambda _: seen.append(2))
    assert seen == [1, 2]


def test_an_interrupt_waits_for_the_end_of_a_deferred_section() -> None:
    """The main thread reading a reply off a socket itself must not lose it to Ctrl-C."""
    import signal

    from regency._api import _failfast

    _failfast.install_handler()
    reached = []
    with pytest.raises(KeyboardInterrupt), _failfast.defer_interrupts:
        signal.raise_signal(signal.SIGINT)
        reached.append("after the signal, inside")
    assert reached == ["after the signal, inside"]
    assert _failfast.defer_interrupts.depth == 0 and not _failfast.defer_interrupts.pending


def _switch_often(frame: FrameType, event: str, arg: object) -> Any:
    """A trace function that offers the other threads a turn before every bytecode run in
    ``_completion.py``: each gap between two steps of ``Completion`` becomes a place where
    the racing threads can interleave (the interpreter alone switches far more rarely)."""
    if frame.f_code.co_filename != _completion.__file__:
        return None
    frame.f_trace_opcodes = True

    def step(frame: FrameType, event: str, arg: object) -> Any:
        if event == "opcode":
            time.sleep(0)
        return step

    return step


def _race_rounds(rounds: int, steps: list[Callable[[Completion, list[Any]], None]],
                 check: Callable[[int, list[Any]], None], fresh: Callable[[], list[Any]]) -> None:
    """Round after round, one thread per step races on a fresh ``Completion``, each offered
    a thread switch before every bytecode of ``Completion``: ``steps[i](cell, notes)`` is
    thread i's part, ``fresh()`` the round's ``notes``, and ``check(round, notes)`` runs
    once every step has returned. An exception in a step fails its round."""
    cells: list[Completion] = []
    notes: list[list[Any]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(steps) + 1)  # the racers and this thread, which sets up
    end = threading.Barrier(len(steps) + 1)

    def race(step: Callable[[Completion, list[Any]], None]) -> None:
        sys.settrace(_switch_often)
        try:
            for _ in range(rounds):
                start.wait()
                try:
                    step(cells[-1], notes[-1])
                except Exception as exc:  # reported by the test thread
                    errors.append(exc)
                end.wait()
        except threading.BrokenBarrierError:
            pass  # the test thread gave up (a failed round)
        finally:
            sys.settrace(None)

    racers = [threading.Thread(target=race, args=(step,)) for step in steps]
    for t in racers:
        t.start()
    try:
        for n in range(rounds):
            cells.append(Completion())
            notes.append(fresh())
            start.wait(timeout=60)
            end.wait(timeout=60)
            assert not errors, f"round {n}: {errors[0]!r}"
            check(n, notes[-1])
    except BaseException:
        start.abort()
        end.abort()
        raise
    finally:
        for t in racers:
            t.join(timeout=60)


def test_callbacks_added_while_another_thread_finishes_each_run_exactly_once() -> None:
    """Two threads add callbacks while a third sets the result: any window in which a
    callback can be lost, fail, or run twice is hit. Every callback must run exactly once."""
    per_adder = 3

    def adder(first: int) -> Callable[[Completion, list[Any]], None]:
        def step(cell: Completion, counts: list[Any]) -> None:
            for i in range(first, first + per_adder):
                cell.add_done_callback(lambda _c, i=i, n=counts: n.__setitem__(i, n[i] + 1))
        return step

    def check(n: int, counts: list[Any]) -> None:
        assert counts == [1] * 2 * per_adder, f"round {n}: runs per callback {counts}"

    _race_rounds(200, [adder(0), adder(per_adder), lambda cell, _: cell.set_result(None)],
                 check, lambda: [0] * 2 * per_adder)


def test_plain_waiters_racing_the_finish_all_wake() -> None:
    """The lock a plain wait sleeps on is made by the first waiter, not per cell: two
    waiters race the finishing thread. No waiter may miss the result (it would sleep out
    its whole timeout)."""
    def waiter(slot: int) -> Callable[[Completion, list[Any]], None]:
        def step(cell: Completion, woke: list[Any]) -> None:
            woke[slot] = cell.wait_plain(timeout=30)
        return step

    def check(n: int, woke: list[Any]) -> None:
        assert woke == [True, True], f"round {n}: woken {woke}"

    _race_rounds(200, [waiter(0), waiter(1), lambda cell, _: cell.set_result(None)], check,
                 lambda: [False, False])


def test_a_timed_out_plain_wait_leaves_the_cell_to_be_finished() -> None:
    c = Completion()
    assert not c.wait_plain(timeout=0.01)
    assert not c.wait_plain(timeout=0)
    c.set_result(3)
    assert c.wait_plain(timeout=0) and c.wait_plain() and c.outcome() == 3


class _Describer:
    """A ``Pending`` label: says what is pending only when asked (a call's collector)."""

    def __init__(self) -> None:
        self.asked = 0

    def pending_text(self) -> str:
        self.asked += 1
        return "p.ping() on ranks [3]"


def test_a_label_object_is_asked_only_on_timeout_and_dropped_when_done() -> None:
    who = _Describer()
    c = Completion(who)
    fut: Future[int] = Future._from(c)
    assert who.asked == 0
    with pytest.raises(TimeoutError, match=r"still waiting for p\.ping\(\) on ranks \[3\]"):
        fut.get(timeout=0.01)
    assert c.describe() == "p.ping() on ranks [3]"
    c.set_result(1)
    assert c.label == "" and c.describe() == ""  # the describer is let go: no cycle through it


def test_the_main_threads_wait_names_its_completion_until_get_has_raised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail-fast lets a blocked get() raise its call's failure (the traceback is kept) only
    while ``_failfast.waiting`` names the completion; compiled waits run no signal handler,
    so the signal is often handled back in get(), after the wait: the name must last until
    get() has raised."""
    from regency._api import _endpoint, _failfast, _future

    assert threading.current_thread() is threading.main_thread()
    done = Completion()
    done.set_exception(RuntimeError("the proc died"))
    assert _endpoint.wait_blocking(done, 1.0)
    assert _failfast.waiting is done  # left for get() to clear
    _failfast.waiting = None
    assert not _endpoint.wait_blocking(Completion(), 0.0)
    assert _failfast.waiting is None  # a timed-out wait has nothing to raise

    seen: list[Any] = []

    def wait_then_fail(c: Completion, timeout: float | None) -> bool:
        c.set_exception(RuntimeError("the proc died"))  # the failure ends the wait
        _failfast.waiting = c
        return True

    monkeypatch.setattr(_future, "wait_blocking", wait_then_fail)
    c = Completion()
    fut: Future[int] = Future._from(c)
    with pytest.raises(RuntimeError, match="the proc died"):
        try:
            fut.get(timeout=5)
        finally:
            seen.append(_failfast.waiting)
    assert seen == [None]  # cleared by the time the failure left get()
    assert _failfast.waiting is None
