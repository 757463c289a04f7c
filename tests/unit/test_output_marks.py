"""Output marks of a worker's procs (``_output_marks``) and the controller's book of them
(``_output_catchup``), ADR 0039."""

from __future__ import annotations

import asyncio
import io
import os
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regency._runtime._output_catchup import GIVE_UP, CatchUp
from regency._runtime._output_marks import Counted, Marks
from regency._wire._messages import OutputMark

CONTROLLER = "tcp:10.0.0.1:4000"
OTHER = "unix:/tmp/other-proc"


def counted(encoding: str = "utf-8", errors: str = "strict") -> tuple[Counted, io.BytesIO,
                                                                       Marks]:
    """A ``Counted`` stdout over a memory buffer (its fd 1 stays what it is: counted)."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding=encoding, errors=errors, write_through=True)
    marks = Marks("proc-1", {CONTROLLER})
    return Counted(stream, marks, 0, os.fstat(1).st_ino), raw, marks


@given(st.lists(st.text(), max_size=8))
def test_the_count_is_the_bytes_that_reached_the_stream(texts: list[str]) -> None:
    out, raw, marks = counted(errors="surrogateescape")
    for text in texts:
        try:
            out.write(text)
        except UnicodeEncodeError:
            pass  # not written, not counted (a lone surrogate outside the escape range)
    assert marks.counts[0] == len(raw.getvalue())


def test_a_latin1_stream_counts_its_own_encoding() -> None:
    out, raw, marks = counted(encoding="latin-1")
    out.writelines(["café\n", "naïve"])
    assert marks.counts[0] == len(raw.getvalue()) == 10  # 12 in UTF-8


def send(marks: Marks, dest: str) -> OutputMark | None:
    """What ``Runtime.send_reply`` does with a mark: send it, then say so."""
    pending = marks.before_send(dest)
    if pending is None:
        return None
    marks.sent(pending)
    return pending.mark


def test_a_mark_goes_before_the_first_message_after_a_print() -> None:
    out, _, marks = counted()
    out.write("hello\n")
    assert marks.counts == (6, 0) and marks.written != marks.drained
    assert send(marks, OTHER) == OutputMark([("proc-1", 6, 0)])
    assert send(marks, OTHER) is None  # told already
    assert marks.written != marks.drained  # still to be said to the controller
    assert send(marks, CONTROLLER) == OutputMark([("proc-1", 6, 0)])
    assert marks.written == marks.drained
    assert send(marks, CONTROLLER) is not None  # Runtime asks only while written != drained


def test_marks_of_a_called_proc_are_passed_on_until_they_reach_the_controller() -> None:
    _, _, marks = counted()
    marks.carry(OutputMark([("proc-2", 40, 3)]))
    assert marks.written != marks.drained  # the next message looks
    both = OutputMark([("proc-1", 0, 0), ("proc-2", 40, 3)])
    assert send(marks, OTHER) == both  # a proc on the way to the controller gets them too
    assert send(marks, "unix:/tmp/third-proc") == both  # so does a third (a port's owner)
    assert send(marks, CONTROLLER) == both
    assert marks.written == marks.drained and not marks.carried


def test_a_thread_replying_while_another_sends_its_mark_makes_its_own() -> None:
    out, _, marks = counted()
    out.write("hello\n")
    first = marks.before_send(CONTROLLER)  # not sent yet
    assert first is not None and marks.drained != marks.written
    second = marks.before_send(CONTROLLER)  # so this reply must not go without a mark
    assert second is not None and second.mark == first.mark


def test_a_mark_met_by_the_stamps_leaves_nobody_behind() -> None:
    book = CatchUp()
    book.want("p", 10, 0)
    assert book.behind == 1
    book.read("p", 0, 6)
    assert book.behind == 1
    book.read("p", 0, 10)
    assert book.behind == 0
    book.want("p", 10, 0)  # met already
    assert book.behind == 0


def test_a_waiter_returns_once_the_lines_are_read() -> None:
    book = CatchUp()
    book.want("p", 5, 3)  # this thread stands for the loop here: waiting is on another
    done = threading.Event()

    def wait() -> None:
        book.wait(timeout=60)
        done.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    sleeping_on(book)
    book.read("p", 0, 5)  # stderr's lines are still to come
    assert not done.wait(0.05)
    book.read("p", 1, 3)
    waiter.join(30)
    assert done.is_set() and book.behind == 0


def sleeping_on(book: CatchUp) -> None:
    """Return once a thread waits on ``book``'s condition (CPython's list of waiters)."""
    for _ in range(3000):
        if book._changed._waiters:  # type: ignore[attr-defined]  # noqa: SLF001
            return
        threading.Event().wait(0.01)
    raise AssertionError("no thread came to wait")


def test_a_waiter_is_freed_by_a_proc_that_ends() -> None:
    book = CatchUp()
    book.want("p", 5, 0)
    waiter = threading.Thread(target=book.wait, kwargs={"timeout": 60})
    waiter.start()
    book.forget("p")
    waiter.join(30)
    assert not waiter.is_alive() and book.behind == 0


def test_marks_that_never_come_true_are_given_up_then_ignored() -> None:
    book = CatchUp()
    for _ in range(GIVE_UP):
        book.want("p", 5, 0)
        assert book.behind == 1
        waiter = threading.Thread(target=book.wait, kwargs={"timeout": 0.0})
        waiter.start()
        waiter.join(30)  # it gives the mark up at once
        assert book.behind == 0
    book.want("p", 50, 0)
    assert book.behind == 0  # its bytes do not reach its agent's pipe: not waited for again


def test_the_loop_thread_never_waits_for_itself() -> None:
    book = CatchUp()
    book.want("p", 5, 0)  # the meeting thread
    book.wait(timeout=60)  # returns at once: only this thread could meet the mark
    assert book.behind == 1


def test_what_is_written_while_the_fd_points_elsewhere_is_not_counted() -> None:
    """``os.dup2(devnull, 1)`` for a while (a library silencing C output, a capture): those
    bytes never reach the agent, and results would wait for them."""
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        out, raw, marks = counted()  # "fd 1" is the test process's own
        out.write("counted\n")
        os.dup2(null, 1)
        out.write("silenced\n")
        os.dup2(saved, 1)
        out.write("counted\n")
        assert marks.counts == (16, 0) and len(raw.getvalue()) == 25
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def test_an_await_waits_on_its_loop_until_the_lines_are_read() -> None:
    """No executor thread: an ``await`` behind a program's busy default executor waited
    for it (about 10 s in the review's program)."""
    book = CatchUp()
    book.want("p", 5, 0)

    async def main() -> bool:
        waiting = asyncio.ensure_future(book.caught_up(timeout=60))
        await asyncio.sleep(0)  # it registered its waiter
        reader = threading.Thread(target=book.read, args=("p", 0, 5))
        reader.start()
        await waiting
        reader.join(30)
        return book.behind == 0

    assert asyncio.run(main())


def test_an_await_gives_up_after_its_timeout_and_a_cancelled_one_leaves_no_waiter() -> None:
    book = CatchUp()
    book.want("p", 5, 0)

    async def main() -> None:
        await book.caught_up(timeout=0.0)
        assert book.behind == 0  # given up
        book.want("p", 6, 0)
        waiting = asyncio.ensure_future(book.caught_up(timeout=60))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())
    assert book._waiters == []  # noqa: SLF001


def test_an_ended_proc_frees_its_waiters_and_its_later_marks_are_met() -> None:
    book = CatchUp()
    book.want("p", 5, 0)

    async def main() -> None:
        waiting = asyncio.ensure_future(book.caught_up(timeout=60))
        await asyncio.sleep(0)
        book.forget("p")
        await waiting

    asyncio.run(main())
    assert book.behind == 0
    book.want("p", 9, 9)  # passed on by a proc it answered, after it ended
    assert book.behind == 0


def test_a_mark_that_says_nothing_new_is_not_passed_on_again() -> None:
    """Two procs calling each other sent each other the same marks for ever (400 marks
    for one print in a review's ping-pong of 200 rounds)."""
    _, _, marks = counted()
    marks.carry(OutputMark([("proc-2", 4, 0)]))
    assert send(marks, OTHER) == OutputMark([("proc-1", 0, 0), ("proc-2", 4, 0)])
    marks.carry(OutputMark([("proc-2", 4, 0), ("proc-1", 0, 0)]))  # its own, and old news
    assert send(marks, OTHER) is None


def test_an_ended_agents_procs_are_forgotten_by_their_names() -> None:
    book = CatchUp()
    book.want("via:tcp:10.0.0.2:4000/mesh-1", 5, 0)
    book.want("via:tcp:10.0.0.3:4000/mesh-1", 5, 0)
    book.forget_procs_of("tcp:10.0.0.2:4000")
    assert book.behind == 1  # the other host's proc still has lines to come


def test_a_mark_given_up_by_one_waiter_frees_the_others() -> None:
    book = CatchUp()
    wanted, done = threading.Event(), threading.Event()

    def meeting_thread() -> None:  # alive to the end: a new thread could reuse its ident
        book.want("p", 5, 0)
        wanted.set()
        done.wait(60)

    loop = threading.Thread(target=meeting_thread)
    loop.start()
    assert wanted.wait(30)
    other = threading.Thread(target=book.wait, kwargs={"timeout": 60})
    other.start()
    sleeping_on(book)
    book.wait(timeout=0.0)  # gives the mark up at once
    other.join(30)
    done.set()
    loop.join(30)
    assert not other.is_alive()  # woken, not left to wait its own 60 s
