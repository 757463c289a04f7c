"""A proc's streams keep each thread's lines whole (``_runtime/_whole_lines``)."""

from __future__ import annotations

import io
import threading
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
