"""A call that cannot be delivered is answered with the cause of its target's death.

When a proc dies, its connection usually closes a moment before its exit (a signal, an exit
code) is reported. A call written in between used to be refused at once as "connection
lost"; it now waits up to ``UNDELIVERABLE_GRACE`` for the real cause (seen under load:
``kill_rank(..., SIGTERM)`` then a call failed without naming SIGTERM).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from regency._runtime._runtime import Runtime
from regency._wire import new_secret
from regency._wire._envelope import encode_call
from regency._wire._messages import SUPERVISION

pytestmark = pytest.mark.timeout(60)
ADDR = "unix:@test-proc-0"
LOST = ConnectionResetError("connection closed")


class Answers:
    """Stands in for ``Runtime.send_reply``: what the refused call was answered."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, port: Any, rank: int | None, status: int, value: Any) -> None:
        assert status == SUPERVISION
        self.texts.append(value[0])


@pytest.fixture
def rt() -> Iterator[Runtime]:
    runtime = Runtime(secret=new_secret(), job="undeliverable", role="controller")
    yield runtime
    runtime.loop.close()


def _refuse(rt: Runtime) -> Answers:
    answers = Answers()
    rt.send_reply = answers  # type: ignore[method-assign]
    header = encode_call("mesh-1", "step", ("controller", 7), ((), 0, (), ()), "root", 0)
    rt._on_undeliverable(ADDR, [header, b""], LOST)
    return answers


async def _answered(answers: Answers) -> None:
    while not answers.texts:  # the grace timer answers it; the test's timeout bounds this
        await asyncio.sleep(0.01)


def test_a_call_after_the_connection_was_lost_waits_for_the_exit_and_names_it(
        rt: Runtime) -> None:
    async def main() -> Answers:
        rt._on_peer_lost(ADDR, LOST)
        answers = _refuse(rt)
        assert answers.texts == []  # scheduled on the loop, which has not run since: no race
        rt.mark_dead(ADDR, "the proc was killed by SIGTERM")  # before the grace can end
        await _answered(answers)
        return answers

    answers = rt.loop.run_until_complete(main())
    assert len(answers.texts) == 1
    assert "SIGTERM" in answers.texts[0] and "connection lost" not in answers.texts[0]


def test_a_call_to_a_proc_whose_exit_is_known_is_answered_at_once(rt: Runtime) -> None:
    rt._on_peer_lost(ADDR, LOST)
    rt.mark_dead(ADDR, "the proc was killed by SIGKILL")
    answers = _refuse(rt)
    assert len(answers.texts) == 1 and "SIGKILL" in answers.texts[0]


def test_without_an_exit_the_connection_loss_is_the_answer_after_the_grace(
        rt: Runtime) -> None:
    async def main() -> Answers:
        rt._on_peer_lost(ADDR, LOST)
        answers = _refuse(rt)
        await _answered(answers)
        return answers

    answers = rt.loop.run_until_complete(main())
    assert len(answers.texts) == 1 and "connection lost" in answers.texts[0]
