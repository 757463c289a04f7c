"""A proc's replies wait for the lines it printed before them (``_output_fence``).

The fence's bookkeeping is driven here with a stand-in for the proc's runtime that records
what would be sent; the pipes are real pipes, the guards real ``LineGuard`` objects.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
import threading
from typing import Any

import pytest

from regency._runtime import _output, _output_fence
from regency._runtime._output import LineGuard
from regency._runtime._output_fence import Fence, Marked, OutputFence


class StandIn:
    """What a :class:`Fence` uses of a runtime: it records the replies and fences sent."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.address = "unix:@proc"
        self.host_agent = "unix:@agent"
        self.sent: list[Any] = []

    def send_frame(self, addr: str, frame: list[Any]) -> None:
        self.sent.append(frame[0])

    def send_sys(self, to: str, msg: Any) -> None:
        assert isinstance(msg, OutputFence) and to == self.host_agent
        assert msg.proc == self.address
        self.sent.append(("fence", msg.token))


@pytest.fixture
def rt() -> Any:
    stand_in = StandIn()
    yield stand_in
    stand_in.loop.close()


def reply(fence: Fence, name: str) -> bool:
    return fence.hold(("unix:@caller", 1), [name])


def test_a_reply_after_no_print_goes_at_once(rt: Any) -> None:
    fence = Fence(rt)
    assert not reply(fence, "r1")
    assert rt.sent == [] and not fence.waiting


def test_a_reply_after_a_print_waits_for_its_fence_and_later_ones_queue_behind(
        rt: Any) -> None:
    fence = Fence(rt)
    fence.wrote()
    assert reply(fence, "r1") and reply(fence, "r2")  # r2 printed nothing, but r1 is ahead
    assert rt.sent == [("fence", 1)] and fence.waiting
    fence.answered(1)
    assert rt.sent == [("fence", 1), "r1", "r2"]
    assert not fence.waiting and not reply(fence, "r3")  # nothing held: the caller sends it
    assert rt.sent == [("fence", 1), "r1", "r2"]


def test_a_print_while_a_fence_is_out_waits_for_one_more_fence(rt: Any) -> None:
    fence = Fence(rt)
    fence.wrote()
    assert reply(fence, "r1")
    fence.wrote()  # printed again while fence 1 is out
    assert reply(fence, "r2") and reply(fence, "r3")
    assert rt.sent == [("fence", 1)]  # one fence out at a time
    fence.answered(1)
    assert rt.sent == [("fence", 1), "r1", ("fence", 2)]  # one fence for both
    fence.answered(1)  # a late duplicate changes nothing
    fence.answered(2)
    assert rt.sent == [("fence", 1), "r1", ("fence", 2), "r2", "r3"]
    assert fence.fences == 2 and not fence.waiting


def test_an_unanswered_fence_lets_its_replies_go_when_it_times_out(rt: Any) -> None:
    fence = Fence(rt)
    fence.wrote()
    assert reply(fence, "r1")
    fence._timed_out(1)  # what the loop runs TIMEOUT_S later
    assert rt.sent == [("fence", 1), "r1"]
    fence.answered(1)  # the answer comes after all: nothing is sent twice
    assert rt.sent == [("fence", 1), "r1"]


def test_release_sends_everything_held_in_order(rt: Any) -> None:
    fence = Fence(rt)
    fence.wrote()
    assert reply(fence, "r1")
    fence.wrote()
    assert reply(fence, "r2")
    fence.release()
    assert rt.sent == [("fence", 1), "r1", "r2"] and not fence.waiting


def test_marked_streams_note_writes_and_pass_everything_else_on(rt: Any) -> None:
    fence = Fence(rt)
    buffer = io.StringIO()
    stream = Marked(buffer, fence)  # type: ignore[arg-type]
    assert fence.written == 0
    assert stream.getvalue() == ""  # anything else goes to the wrapped stream
    print("hello", file=stream)  # type: ignore[arg-type]
    assert fence.written == 2 and buffer.getvalue() == "hello\n"  # print writes twice
    stream.writelines(["a\n", "b\n"])
    assert fence.written == 3 and buffer.getvalue() == "hello\na\nb\n"


def test_a_local_proc_waits_until_its_agent_has_read_its_pipe(rt: Any) -> None:
    r, w = os.pipe()
    try:
        fence = Fence(rt)
        fence.pipes = [w]
        os.write(w, b"printed\n")
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(os.read(r, 100)))
        reader.start()  # the agent
        fence.wrote()
        assert not reply(fence, "r1")  # returned once the pipe was read: send it now
        assert rt.sent == []  # no fence message: the pipe says it all
        reader.join(timeout=30)
        assert got == [b"printed\n"] and fence.drained == fence.written == 1
    finally:
        os.close(r)
        os.close(w)


def test_a_pipe_nobody_reads_holds_a_reply_back_only_so_long(
        rt: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_output_fence, "TIMEOUT_S", 0.05)
    r, w = os.pipe()
    try:
        fence = Fence(rt)
        fence.pipes = [w]
        os.write(w, b"nobody reads this\n")
        fence.wrote()
        assert not reply(fence, "r1")  # given up: order is lost, the reply is not
    finally:
        os.close(r)
        os.close(w)


def test_the_scripts_writes_wait_while_the_agent_holds_the_streams(
        monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", LineGuard(buffer))
    monkeypatch.setattr(sys, "stderr", LineGuard(buffer))
    inside = threading.Event()
    script = threading.Thread(target=lambda: (inside.wait(30), print("result")))
    with _output.held():
        script.start()
        inside.set()
        # a moment for it to try (it cannot write while the streams are held; if it is not
        # scheduled in time, the order below is the same: the test cannot fail by timing)
        script.join(timeout=0.2)
        _output.write_whole("stderr", "[p 0] printed\n")
    script.join(timeout=30)
    assert buffer.getvalue() == "[p 0] printed\nresult\n"


def test_a_write_is_counted_only_once_it_is_done(rt: Any) -> None:
    """Counted before it was done, a write could be taken as covered by a fence another
    thread sent meanwhile, whose flush came before the bytes: the reply after it then
    overtook the line (seen once in 80 runs of tests/system/test_output_order.py)."""
    fence = Fence(rt)
    seen: list[int] = []

    class Stream(io.StringIO):
        def write(self, text: str) -> int:
            seen.append(fence.written)  # what another thread would see meanwhile
            return super().write(text)

    Marked(Stream(), fence).write("line\n")  # type: ignore[arg-type]
    assert seen == [0] and fence.written == 1
