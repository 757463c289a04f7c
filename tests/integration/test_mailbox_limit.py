"""``__mailbox_limit__ = MailboxLimit(...)`` (ADR 0042, ``_api/_mailbox.py``): a full mailbox
refuses the next call with ``MailboxFull`` (``when_full="raise"``), or makes its senders
wait (``"block"``); nothing else is lost, and the actor lives on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from _mailbox_actors import Gates, Refusing, RefusingAsync, RefusingBytes, Sender, SlowBlocking

from regency._wire._frames import SCRATCH_BYTES
from regency.actor import Actor, endpoint, this_host
from regency.config import configured
from regency.errors import MailboxFull

T = 30
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def procs() -> Iterator[Any]:
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="mailbox")
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(scope="module")
def gates(procs: Any) -> Any:
    return procs.spawn("gates", Gates)


def until_logged(gates: Any, *lines: str) -> list[str]:
    """The proc's log once it has all ``lines`` (polled: the event is in another process)."""
    limit = time.monotonic() + T
    while True:
        log: list[str] = gates.history.call_one().get(timeout=T)
        if all(line in log for line in lines):
            return log
        assert time.monotonic() < limit, f"never logged {lines}: {log}"
        time.sleep(0.01)


@pytest.mark.parametrize("cls", [Refusing, RefusingAsync], ids=["sync", "async"])
def test_a_full_mailbox_refuses_the_next_calls_and_runs_the_rest(
        procs: Any, gates: Any, cls: type) -> None:
    tag = f"full-{cls.__name__}"
    actor = procs.spawn(tag.lower(), cls)
    gates.said.call_one().get(timeout=T)  # from now on the proc's stderr is kept
    running = actor.block.call_one(tag)
    until_logged(gates, f"{tag} started")  # out of the mailbox: it holds nothing now
    calls = [actor.record.call_one(f"{tag} {i}") for i in range(4)]
    actor.record.broadcast(f"{tag} broadcast")  # full too: dropped, and logged
    for late in calls[2:]:
        with pytest.raises(MailboxFull, match=r"record\(\) was refused at rank 0: the actor's "
                           r"mailbox is full \(2 calls waiting; MailboxLimit\(max_messages=2"):
            late.get(timeout=T)
    gates.open.call_one(tag).get(timeout=T)
    assert running.get(timeout=T) == tag
    assert [c.get(timeout=T) for c in calls[:2]] == [f"{tag} 0", f"{tag} 1"]
    assert actor.record.call_one(f"{tag} after").get(timeout=T) == f"{tag} after"
    log = until_logged(gates, f"{tag} after")
    assert [line for line in log if line.startswith(f"{tag} ")] == [
        f"{tag} started", f"{tag} 0", f"{tag} 1", f"{tag} after"]
    # the broadcast's drop is said on the proc's stderr (before the calls after it)
    said = gates.said.call_one().get(timeout=T)
    assert (f"{tag.lower()}-" in said and ".record() was refused at rank 0: the actor's "
            "mailbox is full (2 calls waiting" in said and "(a broadcast: dropped)" in said)


def test_a_lone_call_larger_than_the_limit_goes_in_and_a_second_is_refused(
        procs: Any, gates: Any) -> None:
    actor = procs.spawn("bytes", RefusingBytes)
    running = actor.block.call_one("bytes")
    until_logged(gates, "bytes started")
    big = b"y" * 5000
    first, second = actor.length.call_one(big), actor.length.call_one(big)
    with pytest.raises(MailboxFull, match=r"max_bytes=1000"):
        second.get(timeout=T)
    gates.open.call_one("bytes").get(timeout=T)
    assert running.get(timeout=T) == "bytes"
    assert first.get(timeout=T) == 5000


def test_a_full_mailbox_that_blocks_makes_its_sender_wait_and_loses_nothing() -> None:
    high = 64 * 1024
    with configured(send_high_water_bytes=high, socket_buffer_bytes=high):
        pair = this_host().spawn_procs(per_host={"procs": 2}, name="mailbox_block")
    try:
        slow = pair.slice(procs=1).spawn("slow", SlowBlocking)
        sender = pair.slice(procs=0).spawn("sender", Sender)
        n, size = 1500, 4096  # about 6 MiB: far more than the marks and the socket buffers
        sent, seen, received = sender.flood.call_one(slow, n, size).get(timeout=60)
    finally:
        pair.stop().get(timeout=T)
    assert seen == list(range(n))  # nothing lost, in order
    (to_slow,) = [c for conns in sent["connections"].values() for c in conns
                  if c["max_queued"] or c["blocked"]]
    assert to_slow["blocked"] > 0  # the sender waited for room
    (box,) = [b for uid, b in received["mailboxes"].items() if "slow" in uid]
    # the receiver stopped reading past 8 calls: it held no more than those, what one read
    # brings in, and the call that crossed the mark
    assert box["max_count"] <= 8 + SCRATCH_BYTES // size + 1
    assert box["count"] == 0


class NotALimit(Actor):
    __mailbox_limit__ = 8

    @endpoint
    def f(self) -> None:
        pass


def test_a_mailbox_limit_that_is_not_a_mailbox_limit_is_refused_at_spawn(procs: Any) -> None:
    with pytest.raises(TypeError, match=r"NotALimit.__mailbox_limit__ must be a "
                       r"regency.actor.MailboxLimit, not int"):
        procs.spawn("not_a_limit", NotALimit)
