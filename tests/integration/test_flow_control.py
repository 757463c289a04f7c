"""Sends that never starve, and flow control (issue 12 item 8, ADR 0012).

A pipeline of three async actors on three procs (producer -> stage -> consumer) must deliver
while the producer is still sending flat out; a fast sender against a slow receiver must
slow down instead of queueing without bound, on either side of the connection.
"""

from __future__ import annotations

import pytest
from _flow_actors import Counter, Flooder, Producer, Slow, Stage, SyncFlooder

from regency._wire._frames import SCRATCH_BYTES
from regency.actor import this_host
from regency.config import configured

T = 60
ENOUGH = 2000
HIGH = 64 * 1024  # small marks, so that a few MiB of traffic meet them
SIZE = 4096
FRAME = SIZE + 1024  # a message of SIZE payload bytes, with its header, is less than this


@pytest.mark.timeout(120)
def test_a_pipeline_delivers_while_its_producer_is_still_sending() -> None:
    """Each actor on its own proc mesh, so the stage connects to the consumer lazily, while
    its loop is already flooded: before the fix the consumer saw nothing until the producer
    stopped. The producer stops only once the consumer has seen ENOUGH."""
    host = this_host()
    meshes = [host.spawn_procs(per_host={"procs": 1}, name=f"pipe{i}") for i in range(3)]
    try:
        consumer = meshes[2].spawn("consumer", Counter, ENOUGH)
        stage = meshes[1].spawn("stage", Stage, consumer)
        producer = meshes[0].spawn("producer", Producer, stage)
        consumer.set_producer.call_one(producer).get(timeout=T)
        sent, told = producer.run.call_one().get(timeout=T)
        assert told == ENOUGH
        assert sent >= ENOUGH
        # everything sent arrives, in the end
        assert producer.enough.call_one(told).get(timeout=T) is None
    finally:
        for mesh in meshes:
            mesh.stop().get(timeout=T)


@pytest.fixture(scope="module")
def pair():
    with configured(send_high_water_bytes=HIGH, mailbox_high_water_bytes=HIGH,
                    socket_buffer_bytes=HIGH):
        procs = this_host().spawn_procs(per_host={"procs": 2}, name="flow")
    yield procs
    procs.stop().get(timeout=T)


@pytest.mark.parametrize("sender", [Flooder, SyncFlooder], ids=["async", "sync"])
def test_a_fast_sender_slows_to_a_slow_receiver_and_memory_stays_bounded(pair, sender) -> None:
    slow = pair.slice(procs=1).spawn(f"slow_{sender.__name__}", Slow)
    fast = pair.slice(procs=0).spawn(f"fast_{sender.__name__}", sender)
    n = 1500  # about 6 MiB, a hundred times the marks and the socket buffers
    try:
        sent, seen, received = fast.flood.call_one(slow, n, SIZE).get(timeout=T)
    finally:
        fast.stop().get(timeout=T)
        slow.stop().get(timeout=T)
    assert seen == n  # nothing lost
    (to_slow,) = [c for conns in sent["connections"].values() for c in conns
                  if c["max_queued"] or c["blocked"]]
    # the sender waited for room, and its write queue never held more than the mark and
    # the one message that crossed it
    assert to_slow["blocked"] > 0
    assert to_slow["overrun"] == 0
    assert to_slow["max_queued"] <= HIGH + FRAME
    # the receiver stopped reading while its mailbox was full: it held no more than the mark,
    # what one read brings in, and the message that crossed the mark
    (box,) = [b for uid, b in received["mailboxes"].items() if "slow" in uid]
    assert box["max_held"] <= HIGH + SCRATCH_BYTES + FRAME
    assert box["held"] == 0
