"""Forwarded output and the controller's own output never share a line (``_output``).

``print("T0")`` writes ``"T0"`` and then ``"\\n"``; procs' lines forwarded by the loop thread
between the two used to land inside the script's line. Each test opens a line the way
``print`` does, forwards from another thread while it is open (joined before going on, so
the order is fixed, not timed), then ends the line.
"""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path

import pytest

from regency._runtime import _output
from regency._runtime._host_agent import write_lines
from regency._runtime._output import LineGuard


def on_another_thread(fn: object) -> None:
    """Run ``fn`` on a new thread and wait for it (the loop thread stands in)."""
    assert callable(fn)
    t = threading.Thread(target=fn)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive()


def guarded_stdout(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """Make ``sys.stdout`` guarded as in a controller, over a buffer the test reads (in the
    test itself: pytest sets its own ``sys.stdout`` between a fixture and the test)."""
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", LineGuard(buffer))
    return buffer


def test_a_forwarded_line_waits_for_the_end_of_the_scripts_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = guarded_stdout(monkeypatch)
    print("T0", end="")  # the first of print's two writes
    on_another_thread(lambda: write_lines("mesh 1", "stdout", ["from the proc", "and more"]))
    assert stdout.getvalue() == "T0"
    print(" 1.5")
    assert stdout.getvalue() == "T0 1.5\n[mesh 1] from the proc\n[mesh 1] and more\n"


def test_print_and_forwarding_on_two_threads_keep_every_line_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = guarded_stdout(monkeypatch)
    """Between each of print's two writes the other thread forwards a line."""
    guard = sys.stdout
    assert isinstance(guard, LineGuard)

    class Splitter:
        """A file for ``print`` that forwards from another thread after each write."""

        def __init__(self) -> None:
            self.n = 0

        def write(self, text: str) -> int:
            n = guard.write(text)
            self.n += 1
            on_another_thread(lambda: write_lines("m", "stdout", [f"forwarded {self.n}"]))
            return n

    splitter = Splitter()
    for i in range(50):
        print(f"script {i}", file=splitter)
    lines = stdout.getvalue().split("\n")
    assert lines.pop() == ""
    script = [ln for ln in lines if ln.startswith("script ")]
    forwarded = [ln for ln in lines if ln.startswith("[m] forwarded ")]
    assert script == [f"script {i}" for i in range(50)]
    assert len(forwarded) == 100 and len(script) + len(forwarded) == len(lines)


def test_a_forwarded_line_is_written_at_once_at_a_line_boundary(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = guarded_stdout(monkeypatch)
    print("whole")
    on_another_thread(lambda: write_lines("mesh 0", "stdout", ["now"]))
    assert stdout.getvalue() == "whole\n[mesh 0] now\n"


def test_a_line_left_open_too_long_is_ended_by_the_forwarded_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = guarded_stdout(monkeypatch)
    guard = sys.stdout
    assert isinstance(guard, LineGuard)
    print("loading...", end="", flush=True)
    on_another_thread(lambda: write_lines("mesh 0", "stdout", ["hi"]))
    guard.release_overdue()  # not yet overdue: nothing moves
    assert stdout.getvalue() == "loading..."
    monkeypatch.setattr(_output, "HOLD_S", 0.0)
    guard.release_overdue()
    assert stdout.getvalue() == "loading...\n[mesh 0] hi\n"
    print("done")  # the script's line goes on after it
    assert stdout.getvalue() == "loading...\n[mesh 0] hi\ndone\n"


def test_held_lines_go_out_at_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = guarded_stdout(monkeypatch)
    print("no end", end="")
    on_another_thread(lambda: write_lines("mesh 0", "stdout", ["last words"]))
    _output.release_all()
    assert stdout.getvalue() == "no end\n[mesh 0] last words\n"


def test_a_report_interjected_ends_the_open_line_first() -> None:
    buffer = io.StringIO()
    guard = LineGuard(buffer)
    guard.write("half")
    guard.interject("REPORT\n")
    guard.write("rest\n")
    assert buffer.getvalue() == "half\nREPORT\nrest\n"


def test_an_unguarded_stream_gets_the_lines_in_one_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buffer)  # e.g. the script redirected stdout itself
    assert _output.write_whole("stdout", "a\nb\n") is False
    assert buffer.getvalue() == "a\nb\n"


def test_install_wraps_once_and_delegates(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buffer)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    _output.install()
    _output.install()
    guard = sys.stdout
    assert isinstance(guard, LineGuard) and guard.wrapped is buffer
    assert guard.getvalue() == ""  # anything else goes to the wrapped stream
    assert _output.guard("stdout") is guard
    assert _output.guard("stderr") is sys.stderr


def test_stdout_and_stderr_to_one_file_share_their_open_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``2>&1`` or a terminal: a line forwarded to stdout waits for the end of the line the
    script is writing to stderr, and the other way round."""
    with open(tmp_path / "both", "w") as out, open(tmp_path / "both", "a") as err:
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
        _output.install()
        assert isinstance(sys.stdout, LineGuard) and isinstance(sys.stderr, LineGuard)
        assert sys.stdout.terminal is sys.stderr.terminal
        buffer = io.StringIO()  # both streams write here from now on, as to one terminal
        sys.stdout.wrapped = sys.stderr.wrapped = buffer
        print("result", end="", file=sys.stderr)
        on_another_thread(lambda: write_lines("p 0", "stdout", ["inside"]))
        print(" 3", file=sys.stderr)
        print("next", end="")
        on_another_thread(lambda: write_lines("p 1", "stderr", ["warning"]))
        print("")
        assert buffer.getvalue() == "result 3\n[p 0] inside\nnext\n[p 1] warning\n"


def test_stdout_and_stderr_to_two_files_keep_a_guard_each(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
        _output.install()
        assert isinstance(sys.stdout, LineGuard) and isinstance(sys.stderr, LineGuard)
        assert sys.stdout.terminal is not sys.stderr.terminal
        monkeypatch.setattr(sys, "stdout", io.StringIO())  # before the files close
        monkeypatch.setattr(sys, "stderr", io.StringIO())
