"""A 1 GiB transfer does not block the owner's control plane: pings answer promptly."""

from __future__ import annotations

import time

import numpy as np
import pytest
from _rdma_actors import Holder

from regency.actor import this_host

T = 60
GiB = 1 << 30
STEP = 4093
_IDX = np.arange(0, GiB, STEP)
EXPECTED = ((_IDX + 3) % 256).astype(np.uint8).tobytes() + bytes([(GiB - 1 + 3) % 256])


@pytest.fixture(scope="module")
def owner():
    procs = this_host().spawn_procs(per_host={"procs": 1}, name="rdma-live")
    yield procs.spawn("holder", Holder).slice(procs=0)
    procs.stop().get(timeout=T)


@pytest.fixture(scope="module")
def big_and_dst(owner):
    pending = owner.make.call_one("big", "ramp", GiB, 3)  # the owner fills while we touch
    out = np.empty(GiB, dtype=np.uint8)
    out[:] = 0  # touch the pages now, not during the transfer
    return pending.get(timeout=T), out


@pytest.mark.parametrize(("op", "transport"), [("read", "tcp"), ("read", "vm"),
                                               ("write", "unix")])
def test_ping_owner_during_1gib_transfer(owner, big_and_dst, op, transport) -> None:
    big, dst = big_and_dst
    owner.ping.call_one().get(timeout=T)  # connection warm
    if op == "read":
        fut = big.read_into(dst, transport=transport, timeout=T)
    else:
        dst[::STEP] = 0xAB  # marks that the owner's copy must show after the write
        fut = big.write_from(dst, transport=transport, timeout=T)
    during = []
    while not fut.done():
        start = time.perf_counter()
        owner.ping.call_one().get(timeout=T)
        took = time.perf_counter() - start
        if not fut.done():
            during.append(took)
    fut.get(timeout=T)
    assert during, "the transfer finished before a single ping came back"
    print(f"{len(during)} pings during the transfer, slowest {max(during) * 1e3:.1f} ms")
    assert max(during) < 0.5, f"pings took up to {max(during):.3f}s during the transfer"
    spots = dst[::STEP].tobytes() + dst[-1:].tobytes()
    if op == "read":
        assert spots == EXPECTED
    else:
        assert spots != EXPECTED
        assert owner.peek.call_one("big", STEP).get(timeout=T) == spots
