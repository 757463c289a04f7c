"""``ProcMesh.stacks()``: every thread of every proc, grouped, even from a proc spinning in a
tight loop; and a ``Future.get(timeout=)`` that expires says where the callee is stuck."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _stack_actors import Stuck

from regency.actor import ProcMesh, this_host

T = 30


@pytest.fixture(scope="module")
def procs() -> Iterator[ProcMesh]:
    procs = this_host().spawn_procs(per_host={"procs": 4}, name="stacks")
    procs.initialized.get(timeout=T)
    yield procs
    procs.stop().get(timeout=T)


def _group_of(stacks, function: str) -> list[tuple[str, int]]:
    for g in stacks.groups():
        if any(f" in {function}" in frame for frame in g.frames):
            return list(g.members)
    raise AssertionError(f"no stack in {function}:\n{stacks}")


def _hanging(stacks) -> list[tuple[str, int]]:
    """The largest group of ranks waiting in ``hang`` at the same place."""
    groups = [list(g.members) for g in stacks.groups()
              if any(" in hang" in frame for frame in g.frames)]
    return max(groups, key=len, default=[])


def test_stacks_group_identical_stacks_and_find_the_spinning_rank(procs, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    stuck = procs.spawn("stuck", Stuck)
    fut = stuck.hang.call(str(flag))
    try:
        # The calls start in their own time, and a waiting rank is sometimes caught in its
        # os.path.exists rather than its sleep (another stack): look until all four run and
        # the three waiting ones are caught in the same place, for up to T seconds.
        deadline = time.monotonic() + T
        while True:
            stacks = procs.stacks()
            inside = {t.rank for t in stacks.threads if any(" in hang" in f or " in spin_until"
                                                               in f for f in t.frames)}
            settled = inside == {0, 1, 2, 3} and len(_hanging(stacks)) == 3
            if settled or time.monotonic() > deadline:
                break
        assert _group_of(stacks, "spin_until") == [("stacks", 2)]
        assert sorted(_group_of(stacks, "hang")) == [("stacks", 0), ("stacks", 1),
                                                     ("stacks", 3)]
        text = str(stacks)
        assert "3 threads in stacks ranks 0-1,3" in text
        assert "1 thread in stacks ranks 2" in text
        assert not stacks.missing
    finally:
        flag.touch()
        fut.get(timeout=T)


def test_a_timeout_names_where_the_callee_is_stuck(procs, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    stuck = procs.spawn("stuck2", Stuck)
    fut = stuck.hang.call(str(flag))
    try:
        with pytest.raises(TimeoutError) as info:
            fut.get(timeout=1.0)
        message = str(info.value)
        assert "no result within 1.0s" in message
        assert "Where the callee is now" in message
        assert " in hang" in message or " in spin_until" in message or "ranks" in message
    finally:
        flag.touch()
        fut.get(timeout=T)


def test_a_short_timeout_does_not_pay_for_stacks(procs, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    stuck = procs.spawn("stuck3", Stuck)
    fut = stuck.hang.call(str(flag))
    try:
        with pytest.raises(TimeoutError) as info:
            fut.get(timeout=0.1)
        assert "Where the callee is now" not in str(info.value)
    finally:
        flag.touch()
        fut.get(timeout=T)
