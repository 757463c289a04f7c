"""A proc's streams keep each thread's lines whole (``_runtime/_whole_lines``)."""

from __future__ import annotations

import io
import os
import threading
import time
from collections.abc import Callable

import pytest

from regency._runtime._whole_lines import HOLD_LIMIT, WholeLines


class Writer(threading.Thread):
    """A thread that runs ``fn``, says so (``wrote``), and stays alive until ``finish``."""

    def __init__(self, fn: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.wrote = threading.Event()
        self.release = threading.Event()
        self.start()
        assert self.wrote.wait(30)

    def run(self) -> None:
        self.fn()
        self.wrote.set()
        self.release.wait(30)

    def finish(self) -> None:
        self.release.set()
        self.join(30)


def test_a_line_goes_out_once_it_ends() -> None:
    out = io.StringIO()
    lines = WholeLines(out)
    assert lines.write("half") == 4
    assert out.getvalue() == ""
    lines.write(" and the rest\nnext ")
    assert out.getvalue() == "half and the rest\n"


def test_another_threads_line_does_not_land_inside_an_unfinished_one() -> None:
    out = io.StringIO()
    lines = WholeLines(out)
    lines.write("alpha says")  # print() writes its pieces one at a time
    other = Writer(lambda: lines.write("beta says 1\n"))
    lines.write(" 0\n")
    other.finish()
    assert out.getvalue() == "beta says 1\nalpha says 0\n"


def test_flush_sends_the_callers_unfinished_line_only() -> None:
    out = io.StringIO()
    lines = WholeLines(out)
    other = Writer(lambda: lines.write("theirs"))
    lines.write("mine")
    lines.flush()  # a logging handler's flush must not cut another thread's print
    assert out.getvalue() == "mine"
    other.finish()
    lines.flush()  # the writer has ended: its line is nobody's to finish
    assert out.getvalue() == "minetheirs"


def test_flush_all_sends_every_unfinished_line() -> None:
    out = io.StringIO()
    lines = WholeLines(out)
    other = Writer(lambda: lines.write("theirs"))
    lines.write("mine")
    lines.flush_all()
    other.finish()
    assert out.getvalue() in ("minetheirs", "theirsmine")


def test_a_long_unfinished_line_is_not_held_without_bound() -> None:
    out = io.StringIO()
    lines = WholeLines(out)
    lines.write("x" * HOLD_LIMIT)
    assert out.getvalue() == ""
    lines.write("y")
    assert out.getvalue() == "x" * HOLD_LIMIT + "y"


def test_writelines_and_what_is_not_text() -> None:
    out = io.StringIO()
    lines = WholeLines(out)
    lines.writelines(["a\n", "b", "c\n"])
    assert out.getvalue() == "a\nbc\n"
    with pytest.raises(TypeError, match="must be str, not bytes"):
        lines.write(b"raw")  # type: ignore[arg-type]
    assert lines.getvalue() == "a\nbc\n"  # the rest is the wrapped stream's


def test_a_forked_child_gets_a_free_lock_and_only_its_own_unfinished_line() -> None:
    """A child forked while another thread held the lock printed never (DataLoader
    workers, multiprocessing), and wrote the parent's other threads' lines a second time."""
    r, w = os.pipe()
    out = os.fdopen(w, "w", buffering=1)
    lines = WholeLines(out)
    os.register_at_fork(after_in_child=lines.after_fork)
    theirs = Writer(lambda: lines.write("theirs "))
    lines.write("mine ")
    holding = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with lines._lock:  # noqa: SLF001 - a thread in the middle of a write, at the fork
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert holding.wait(30)
    pid = os.fork()
    if pid == 0:  # the child: one thread, this one
        try:
            lines.write("child\n")
            lines.flush()
        finally:
            os._exit(0)
    release.set()
    holder.join(30)
    deadline = time.monotonic() + 30
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the child hung on the inherited lock")
        time.sleep(0.01)
    theirs.finish()
    out.close()
    with os.fdopen(r) as got:
        assert got.read() == "mine child\n"  # not the parent's other thread's
