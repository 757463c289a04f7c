"""A ``this_host()`` proc's replies wait for the lines it printed (``_output_fence``).

The pipes are real pipes, the agent a thread that reads them, the guards real
``LineGuard`` objects.
"""

from __future__ import annotations

import io
import os
import sys
import threading

import pytest

from regency._runtime import _output, _output_fence
from regency._runtime._output import LineGuard
from regency._runtime._output_fence import Fence, Marked
from regency._wire._messages import OutputMark

CONTROLLER = "unix:/tmp/controller"


def send(fence: Fence) -> None:
    """What ``Runtime.send_reply`` does with the fence before it sends."""
    if fence.written != fence.drained:
        fence.wait_out()


def test_marked_streams_count_writes_and_pass_everything_else_on() -> None:
    fence = Fence([], {CONTROLLER})
    buffer = io.StringIO()
    stream = Marked(buffer, fence)  # type: ignore[arg-type]
    assert fence.written == 0
    assert stream.getvalue() == ""  # anything else goes to the wrapped stream
    print("hello", file=stream)  # type: ignore[arg-type]
    assert fence.written == 2 and buffer.getvalue() == "hello\n"  # print writes twice
    stream.writelines(["a\n", "b\n"])
    assert fence.written == 3 and buffer.getvalue() == "hello\na\nb\n"


def test_a_write_is_counted_only_once_it_is_done() -> None:
    """Counted before it was done, a write could be taken as covered by a flush another
    thread made meanwhile, before its bytes: the reply after it then overtook the line
    (seen once in 80 runs of tests/system/test_output_order.py)."""
    fence = Fence([], {CONTROLLER})
    seen: list[int] = []

    class Stream(io.StringIO):
        def write(self, text: str) -> int:
            seen.append(fence.written)  # what another thread would see meanwhile
            return super().write(text)

    Marked(Stream(), fence).write("line\n")  # type: ignore[arg-type]
    assert seen == [0] and fence.written == 1


def test_a_reply_after_no_print_does_not_wait() -> None:
    fence = Fence([], {CONTROLLER})
    send(fence)  # nothing written: no flush, no wait
    assert fence.written == fence.drained == 0


def test_a_reply_waits_until_the_agent_has_read_the_pipe() -> None:
    r, w = os.pipe()
    try:
        fence = Fence([w], {CONTROLLER})
        os.write(w, b"printed\n")
        fence.wrote()
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(os.read(r, 1 << 16)))
        reader.start()  # the agent
        send(fence)  # returns once the pipe was read
        reader.join(timeout=30)
        assert got == [b"printed\n"] and fence.drained == fence.written == 1
    finally:
        os.close(r)
        os.close(w)


def test_a_pipe_refilled_by_another_writer_ends_the_wait_once_it_was_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A subprocess writing to the proc's stdout keeps the pipe from staying empty; one
    read of the agent takes what was there, so a drop in the unread count is enough (the
    wait would otherwise last until the deadline, here the test's own timeout)."""
    monkeypatch.setattr(_output_fence, "TIMEOUT_S", 600.0)
    r, w = os.pipe()
    try:
        fence = Fence([w], {CONTROLLER})
        os.write(w, b"printed\n" + b"x" * 1000)
        fence.wrote()
        done = threading.Event()

        def agent_and_subprocess() -> None:
            while not done.is_set():
                os.read(r, 1 << 16)  # everything there
                os.write(w, b"y" * 100)  # and more comes at once

        agent = threading.Thread(target=agent_and_subprocess)
        agent.start()
        try:
            send(fence)
        finally:
            done.set()
            agent.join(timeout=30)
        assert fence.drained == 1
    finally:
        os.close(r)
        os.close(w)


def test_a_pipe_nobody_reads_holds_a_reply_back_only_so_long(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_output_fence, "TIMEOUT_S", 0.05)
    r, w = os.pipe()
    try:
        fence = Fence([w], {CONTROLLER})
        os.write(w, b"nobody reads this\n")
        fence.wrote()
        send(fence)  # given up: order is lost, the reply is not
        assert fence.drained == 1
    finally:
        os.close(r)
        os.close(w)


def test_a_print_inside_a_write_does_not_deadlock() -> None:
    """A ``__del__`` or a signal handler may print on a thread inside ``wrote()``."""
    fence = Fence([], {CONTROLLER})
    stream = Marked(io.StringIO(), fence)  # type: ignore[arg-type]
    with fence._counting:  # as if inside wrote() on this thread
        print("from __del__", file=stream)  # type: ignore[arg-type]
    assert fence.written == 2


def test_the_scripts_writes_wait_while_the_agent_holds_their_stream(
        monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", LineGuard(buffer))
    inside = threading.Event()
    script = threading.Thread(target=lambda: (inside.wait(30), print("result")))
    with _output.held("stdout"):
        script.start()
        inside.set()
        # a moment for it to try (it cannot write while the stream is held; if it is not
        # scheduled in time, the order below is the same: the test cannot fail by timing)
        script.join(timeout=0.2)
        _output.write_whole("stdout", "[p 0] printed\n")
    script.join(timeout=30)
    assert buffer.getvalue() == "[p 0] printed\nresult\n"


def test_holding_one_stream_never_waits_for_the_other(monkeypatch: pytest.MonkeyPatch) -> None:
    """stdout and stderr to two files: the agent holds only the lock of the stream its
    lines go to, so a script thread inside a stderr write (a signal handler in it printing
    to stdout, say) cannot wait on the agent while the agent waits on it."""
    out, err = LineGuard(io.StringIO()), LineGuard(io.StringIO())
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    def agent_reads() -> None:
        with _output.held("stdout"):
            _output.write_whole("stdout", "[p 0] printed\n")

    with err.lock:  # the script, inside a stderr write
        agent = threading.Thread(target=agent_reads)
        agent.start()
        agent.join(timeout=30)
        assert not agent.is_alive()
    assert out.wrapped.getvalue() == "[p 0] printed\n"


def test_marks_of_a_worker_proc_it_called_go_before_its_next_message_to_the_controller(
) -> None:
    """A ``this_host()`` proc that called a worker's proc passes that proc's output mark on
    (ADR 0039); it does not wait for those lines itself."""
    fence = Fence([], {CONTROLLER})
    fence.carry(OutputMark([("worker-proc", 7, 0)]))
    assert fence.written != fence.drained  # the next message looks
    pending = fence.before_send(CONTROLLER)
    assert pending is not None and pending.mark == OutputMark([("worker-proc", 7, 0)])
    fence.sent(pending)
    assert not fence.carried and fence.before_send(CONTROLLER) is None


def test_a_this_host_proc_between_two_worker_procs_passes_their_marks_on() -> None:
    """Controller -> worker proc -> this proc -> worker proc: the marks must reach the
    first worker proc, which passes them on to the controller."""
    fence = Fence([], {CONTROLLER})
    fence.carry(OutputMark([("worker-2", 7, 0)]))
    pending = fence.before_send("tcp:10.0.0.2:5000")  # the reply to the first worker proc
    assert pending is not None and pending.mark == OutputMark([("worker-2", 7, 0)])
    fence.sent(pending)
    assert fence.before_send("tcp:10.0.0.2:5000") is None  # once per change
    assert fence.written != fence.drained  # still unsaid at the controller: it looks
    pending = fence.before_send(CONTROLLER)
    assert pending is not None
    fence.sent(pending)
    assert fence.before_send(CONTROLLER) is None and fence.written == fence.drained
