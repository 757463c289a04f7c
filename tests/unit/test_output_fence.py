"""A proc's replies never leave before the lines it printed (``_output_fence``).

The fence is driven here with a stand-in for the proc's runtime that records what it would
send; the pipes are real pipes, the guards real ``LineGuard`` objects.
"""

from __future__ import annotations

import asyncio
import io
import os
import pickle
import sys
import threading
from typing import Any

import pytest

from regency._runtime import _output, _output_fence
from regency._runtime._output import LineGuard
from regency._runtime._output_fence import Fence, Marked, RelayFrame

CALLER = "tcp:10.0.0.1:5000"


class StandIn:
    """What a :class:`Fence` uses of a runtime: it records the frames relayed."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.address = "tcp:10.0.0.2:6000"
        self.host_agent = "tcp:10.0.0.2:7000"
        self.relayed: list[RelayFrame] = []
        self.on_send: Any = None  # run inside send_sys, as a __del__ might

    def send_sys(self, to: str, msg: Any) -> None:
        assert isinstance(msg, RelayFrame) and to == self.host_agent
        assert msg.proc == self.address
        if self.on_send is not None:
            self.on_send()
        self.relayed.append(msg)


@pytest.fixture
def rt() -> Any:
    stand_in = StandIn()
    yield stand_in
    stand_in.loop.close()


def send(fence: Fence, name: str, to: str = CALLER) -> bool:
    """What ``Runtime.send_reply`` does with the fence: True when the fence took it."""
    if fence.written == fence.drained and not fence.waiting:
        return False
    return fence.hold(to, [name.encode()])


def relayed(rt: Any) -> list[tuple[int, str, bytes]]:
    return [(m.seq, m.to, bytes(m.parts[0])) for m in rt.relayed]


def test_a_reply_after_no_print_goes_straight_to_its_caller(rt: Any) -> None:
    fence = Fence(rt)
    assert not send(fence, "r1")
    assert rt.relayed == [] and not fence.waiting


def test_a_reply_after_a_print_goes_through_the_agent_and_so_does_what_follows(
        rt: Any) -> None:
    fence = Fence(rt)
    fence.wrote()
    assert send(fence, "r1")
    assert fence.drained == fence.written == 1 and fence.waiting
    assert send(fence, "r2")  # printed nothing, but must not overtake r1
    assert fence.hold("unix:@owner", [b"failed"])  # a system message likewise
    assert relayed(rt) == [(1, CALLER, b"r1"), (2, CALLER, b"r2"),
                           (3, "unix:@owner", b"failed")]
    fence.passed_on(2)
    assert fence.waiting  # the third is still on its way
    fence.passed_on(3)
    fence.passed_on(1)  # a late answer changes nothing
    assert not fence.waiting and fence.acked == 3
    assert not send(fence, "r4")  # straight again


def test_the_frame_is_relayed_without_a_copy(rt: Any) -> None:
    fence = Fence(rt)
    fence.wrote()
    payload = bytearray(b"big payload")
    assert fence.hold(CALLER, [b"header", payload])
    parts = rt.relayed[0].parts
    assert all(isinstance(p, pickle.PickleBuffer) for p in parts)
    payload[:3] = b"BIG"
    assert bytes(parts[1]) == b"BIG payload"  # a view of the caller's buffer


def test_marked_streams_count_writes_and_pass_everything_else_on(rt: Any) -> None:
    fence = Fence(rt)
    buffer = io.StringIO()
    stream = Marked(buffer, fence)  # type: ignore[arg-type]
    assert fence.written == 0
    assert stream.getvalue() == ""  # anything else goes to the wrapped stream
    print("hello", file=stream)  # type: ignore[arg-type]
    assert fence.written == 2 and buffer.getvalue() == "hello\n"  # print writes twice
    stream.writelines(["a\n", "b\n"])
    assert fence.written == 3 and buffer.getvalue() == "hello\na\nb\n"


def test_a_write_is_counted_only_once_it_is_done(rt: Any) -> None:
    """Counted before it was done, a write could be taken as covered by a flush another
    thread made meanwhile, before its bytes: the reply after it then overtook the line
    (seen once in 80 runs of tests/system/test_output_order.py)."""
    fence = Fence(rt)
    seen: list[int] = []

    class Stream(io.StringIO):
        def write(self, text: str) -> int:
            seen.append(fence.written)  # what another thread would see meanwhile
            return super().write(text)

    Marked(Stream(), fence).write("line\n")  # type: ignore[arg-type]
    assert seen == [0] and fence.written == 1


def test_a_print_while_a_frame_is_relayed_does_not_deadlock(rt: Any) -> None:
    """The garbage collector may run a ``__del__`` that prints, or a signal handler may
    print, on the thread that is relaying a frame (its locks held)."""
    fence = Fence(rt)
    stream = Marked(io.StringIO(), fence)  # type: ignore[arg-type]
    rt.on_send = lambda: print("from __del__", file=stream)  # type: ignore[arg-type]
    fence.wrote()
    done = threading.Event()
    relaying = threading.Thread(target=lambda: (send(fence, "r1"), done.set()))
    relaying.start()
    relaying.join(timeout=30)
    assert done.is_set()
    assert fence.written == 3 and fence.drained == 1  # the print inside came after the count


def test_a_forked_child_gets_fresh_locks(rt: Any) -> None:
    fence = Fence(rt)
    old = fence._lock
    fence._lock.acquire()  # another thread held it at the fork
    fence.after_fork()
    assert fence._lock is not old
    with fence._lock, fence._counting:
        pass
    old.release()


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
        assert not send(fence, "r1")  # returned once the pipe was read: send it now
        assert rt.relayed == []  # nothing relayed: the pipe says it all
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
        assert not send(fence, "r1")  # given up: order is lost, the reply is not
    finally:
        os.close(r)
        os.close(w)


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
