"""``MailboxLimit`` and a mailbox's backlog with one (``_runtime/_cell._Backlog``): where it
pauses the connection (``when_full="block"``) and what it refuses (``"raise"``)."""

from __future__ import annotations

from typing import Any

import pytest

from regency._runtime._cell import _Backlog
from regency.actor import MailboxLimit


class FakeRuntime:
    """What a backlog asks of its runtime: the default mark, and pausing a connection."""

    mailbox_high = 10_000

    def __init__(self) -> None:
        self.paused = 0

    def backlogged(self) -> Any:
        self.paused += 1
        return f"conn{self.paused}"


def frame(n: int) -> list[memoryview]:
    return [memoryview(b"h" * 10), memoryview(b"x" * (n - 10))]


def test_blocking_at_a_count_pauses_past_it_and_resumes_at_half() -> None:
    rt = FakeRuntime()
    box = _Backlog(rt, max_messages=4)
    for _ in range(4):
        box.add(frame(100))
    assert rt.paused == 0
    box.add(frame(100))  # the fifth: past the mark
    assert rt.paused == 1 and box.paused == ["conn1"]
    assert not box.take(frame(100))  # 4 left: more than half
    assert not box.take(frame(100))  # 3
    assert box.take(frame(100))  # 2: half the mark, read again
    assert box.most_n == 5


def test_blocking_in_bytes_replaces_the_default_mark() -> None:
    rt = FakeRuntime()
    box = _Backlog(rt, max_bytes=500)
    box.add(frame(400))
    assert rt.paused == 0
    box.add(frame(400))
    assert rt.paused == 1
    assert box.full(frame(10_000)) == 0  # blocking refuses nothing


def test_refusing_at_a_count_takes_a_lone_message_and_refuses_past_the_limit() -> None:
    rt = FakeRuntime()
    box = _Backlog(rt, max_messages=2, refuse=True)
    assert box.full(frame(100)) == 0
    box.add(frame(100))
    assert box.full(frame(100)) == 0
    box.add(frame(100))
    assert box.full(frame(100)) == 2  # two waiting: the third is refused
    assert not box.take(frame(100))
    assert box.full(frame(100)) == 0


def test_refusing_never_pauses_and_its_bytes_default_to_the_process_mark() -> None:
    rt = FakeRuntime()  # mailbox_high_water_bytes: 10,000
    box = _Backlog(rt, max_messages=100, refuse=True)
    for _ in range(3):
        box.add(frame(6000))  # well past the default mark in bytes: nothing pauses
    assert rt.paused == 0
    box = _Backlog(rt, max_messages=100, refuse=True)
    box.add(frame(6000))
    assert box.full(frame(6000)) == 1  # the default mark refuses, in bytes


def test_refusing_in_bytes_takes_a_lone_large_message() -> None:
    rt = FakeRuntime()
    box = _Backlog(rt, max_bytes=50_000, refuse=True)
    big = frame(60_000)
    assert box.full(big) == 0  # alone: taken, however large
    box.add(big)
    assert rt.paused == 0  # above the process's mark, but refusing never pauses
    assert box.full(frame(20)) == 1
    box.take(big)
    assert box.full(frame(40_000)) == 0


def test_the_calls_a_sync_actor_read_itself_count_until_they_run() -> None:
    box = _Backlog(FakeRuntime(), max_messages=2, max_bytes=1000, refuse=True)
    box.read_in(frame(300))  # read by the actor's thread, not queued by the loop
    box.read_in(frame(300))
    assert box.full(frame(100)) == 2
    box.take(frame(300))  # one ran
    assert box.full(frame(100)) == 0
    assert box.full(frame(800)) == 1  # in bytes: 300 waiting + 800 > 1000


@pytest.mark.parametrize(("kwargs", "words"), [
    ({}, "give max_messages, max_bytes or both"),
    ({"max_messages": 0}, r"max_messages=0\): a positive int or None"),
    ({"max_bytes": -5}, r"max_bytes=-5\): a positive int or None"),
    ({"max_messages": 4, "when_full": "drop"}, r"when_full='drop'\): one of 'block', "
                                                r"'raise'"),
])
def test_a_bad_mailbox_limit_says_what_is_wrong(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        MailboxLimit(**kwargs)


@pytest.mark.parametrize("bad", [True, "8", 2.5])
def test_a_mailbox_limit_that_is_not_an_int_is_a_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match=r"a positive int or None, not"):
        MailboxLimit(max_messages=bad)  # type: ignore[arg-type]

