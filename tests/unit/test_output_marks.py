"""Output marks of a worker's procs (``_output_marks``) and the controller's book of them
(``_output_catchup``), ADR 0039."""

from __future__ import annotations

import io
import os
import threading

from hypothesis import given
from hypothesis import strategies as st

from regency._runtime._output_catchup import GIVE_UP, CatchUp
from regency._runtime._output_marks import Counted, Marks
from regency._wire._messages import OutputMark

CONTROLLER = "tcp:10.0.0.1:4000"


def counted(encoding: str = "utf-8", errors: str = "strict") -> tuple[Counted, io.BytesIO,
                                                                       Marks]:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding=encoding, errors=errors, write_through=True)
    marks = Marks("proc-1", {CONTROLLER}, {})
    return Counted(stream, marks, 0), raw, marks


@given(st.lists(st.text(), max_size=8))
def test_the_count_is_the_bytes_that_reached_the_stream(texts: list[str]) -> None:
    out, raw, marks = counted(errors="surrogateescape")
    for text in texts:
        try:
            out.write(text)
        except UnicodeEncodeError:
            pass  # not written, not counted (a lone surrogate outside the escape range)
    assert marks.written == len(raw.getvalue())


def test_a_latin1_stream_counts_its_own_encoding() -> None:
    out, raw, marks = counted(encoding="latin-1")
    out.writelines(["café\n", "naïve"])
    assert marks.written == len(raw.getvalue()) == 10  # 12 in UTF-8


def test_a_mark_goes_before_messages_to_the_controller_only() -> None:
    out, _, marks = counted()
    out.write("hello\n")
    assert marks.written == 6 and marks.drained == 0
    assert marks.before_send("unix:/tmp/other-proc") is None
    assert marks.drained == 0  # still to be said to the controller
    assert marks.before_send(CONTROLLER) == OutputMark("proc-1", 6, 0)
    assert marks.drained == marks.written


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
    started = threading.Event()

    def wait() -> None:
        started.set()
        book.wait(timeout=60)
        done.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    started.wait(10)
    book.read("p", 0, 5)  # stderr's lines are still to come
    book.read("p", 1, 3)
    waiter.join(30)
    assert done.is_set() and book.behind == 0


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


def test_no_marks_once_a_stream_is_sent_elsewhere() -> None:
    """``os.dup2(devnull, 1)`` (a library silencing C output): the bytes counted would
    never reach the agent, and each result would wait for them."""
    r, w = os.pipe()
    try:
        marks = Marks("proc-1", {CONTROLLER}, {w: os.fstat(w).st_ino})
        marks.wrote(0, 6)
        assert marks.before_send(CONTROLLER) == OutputMark("proc-1", 6, 0)
        marks.wrote(0, 6)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, w)
        os.close(null)
        assert marks.before_send(CONTROLLER) is None
        assert marks.controllers == set()  # for good
    finally:
        os.close(r)
        os.close(w)
