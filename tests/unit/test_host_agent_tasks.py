"""The host agent keeps its own tasks until they end and logs their failures (an exception in
an untracked asyncio task used to be lost, and the task itself could be collected)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterator

import pytest

from regency._runtime._host_agent import HostAgent, ProcRecord, open_pipes
from regency._runtime._runtime import Runtime
from regency._wire import new_secret


@pytest.fixture
def agent() -> Iterator[HostAgent]:
    rt = Runtime(secret=new_secret(), job="tasks", role="controller")
    yield HostAgent(rt)
    rt.loop.close()


def test_a_failing_task_is_kept_until_it_ends_and_its_failure_logged(
        agent: HostAgent, caplog: pytest.LogCaptureFixture) -> None:
    started = asyncio.Event()
    go = asyncio.Event()

    async def fails() -> None:
        started.set()
        await go.wait()
        raise ValueError("failed on purpose")

    async def main() -> None:
        task = agent.track(fails(), "do something")
        await started.wait()
        assert task in agent._tasks  # referenced while it runs
        go.set()
        await asyncio.wait([task])  # its own done callback ran first
        assert task not in agent._tasks

    with caplog.at_level(logging.ERROR, logger="regency.host"):
        agent.rt.loop.run_until_complete(main())
    [record] = [r for r in caplog.records if r.name == "regency.host"]
    assert "failed to do something" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], ValueError)


def test_a_task_that_ends_well_or_is_cancelled_logs_nothing(
        agent: HostAgent, caplog: pytest.LogCaptureFixture) -> None:
    async def fine() -> None:
        return None

    async def forever() -> None:
        await asyncio.Event().wait()

    async def main() -> None:
        ok = agent.track(fine(), "finish")
        stuck = agent.track(forever(), "wait")
        await asyncio.wait([ok])
        stuck.cancel()
        await asyncio.wait([stuck])
        assert not agent._tasks

    with caplog.at_level(logging.ERROR, logger="regency.host"):
        agent.rt.loop.run_until_complete(main())
    assert not [r for r in caplog.records if r.name == "regency.host"]


def test_a_procs_stderr_lines_stay_on_stderr_after_its_stdout_closed() -> None:
    rec = ProcRecord("unix:@p", "p 0", "unix:@owner", "mesh", 0)
    rec.pipes, rec.pipes_at_start = [7, 8], (7, 8)
    assert open_pipes(rec) == [(7, sys.stdout), (8, sys.stderr)]
    rec.pipes.remove(7)  # the proc closed its stdout: the agent read its end
    assert open_pipes(rec) == [(8, sys.stderr)]  # was paired with stdout by position
