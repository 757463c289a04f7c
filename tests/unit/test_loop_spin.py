"""``LoopSpin``: the proc's loop polls for a while after a frame, never on a busy machine."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from regency._runtime._loop_spin import LoopSpin


class _Machine:
    """Stands for ``ReadHere``: only whether the machine is busy matters here."""

    def __init__(self, busy: bool) -> None:
        self.is_busy = busy

    def busy(self) -> bool:
        return self.is_busy


async def _iterations_until_idle(spin: LoopSpin) -> int:
    """Loop iterations from a kick until the spin stops scheduling itself."""
    spin.kick()
    n = 0
    while spin._on:
        await asyncio.sleep(0)
        n += 1
    return n


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_a_kick_keeps_the_loop_polling_then_it_stops(loop: asyncio.AbstractEventLoop) -> None:
    spin = LoopSpin(loop, _Machine(False), 0.02)  # type: ignore[arg-type]
    assert loop.run_until_complete(_iterations_until_idle(spin)) > 1
    assert not spin._on  # and nothing is left scheduled


def test_a_busy_machine_gets_no_spin(loop: asyncio.AbstractEventLoop) -> None:
    spin = LoopSpin(loop, _Machine(True), 10.0)  # type: ignore[arg-type]
    # the first tick sees the machine busy and does not schedule another
    assert loop.run_until_complete(_iterations_until_idle(spin)) <= 2


def test_kicks_while_spinning_schedule_no_second_tick(loop: asyncio.AbstractEventLoop) -> None:
    spin = LoopSpin(loop, _Machine(False), 10.0)  # type: ignore[arg-type]
    spin.kick()
    spin.kick()
    assert len(loop._ready) == 1  # type: ignore[attr-defined]
    spin._spin = 0.0  # let it end
    loop.run_until_complete(_iterations_until_idle(spin))
