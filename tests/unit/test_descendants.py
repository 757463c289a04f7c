"""The fork server's nets for a proc's descendants (``_runtime/_descendants.py``): finding
processes by their environment mark, and the children of a process, from ``/proc``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from regency._runtime._descendants import (
    MARK,
    Endings,
    _group_of,
    _still_ours,
    adopted,
    marked,
    new_mark,
)

SLEEPER = [sys.executable, "-c", "import sys; sys.stdin.read()"]  # ends when we close stdin


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        child.kill()
        child.wait()


def start(children: list[subprocess.Popen[bytes]], **env: str) -> int:
    child = subprocess.Popen(SLEEPER, stdin=subprocess.PIPE, env={**os.environ, **env})
    children.append(child)
    return child.pid


def test_processes_are_found_by_their_mark_only(children: list[subprocess.Popen[bytes]]
                                                ) -> None:
    a = start(children, **{MARK: "test.1"})
    b = start(children, **{MARK: "test.12"})  # a mark that starts like another
    start(children)
    assert marked({"test.1"}) == {a: "test.1"}
    assert marked({"test.1", "test.12"}) == {a: "test.1", b: "test.12"}
    assert marked(set()) == {}
    assert marked({"test.1"}, skip=a) == {}


def test_the_children_of_a_process_are_its_live_ones(children: list[subprocess.Popen[bytes]]
                                                     ) -> None:
    pids = {start(children), start(children)}
    assert pids <= set(adopted(os.getpid()))
    gone = children.pop()
    gone.kill()
    gone.wait()  # reaped: no longer a child at all
    assert gone.pid not in adopted(os.getpid())


def test_nothing_is_due_until_a_proc_ended() -> None:
    endings = Endings()
    assert endings.timeout() is None
    endings.begin({})
    assert endings.timeout() is None


def test_marks_are_never_given_twice_and_fit_a_process_name() -> None:
    marks = {new_mark() for _ in range(1000)}
    assert len(marks) == 1000
    assert all(m.startswith("rg") and len(m.encode()) <= 15 for m in marks)


def test_a_group_is_signalled_only_while_a_member_seen_before_is_in_it(
        children: list[subprocess.Popen[bytes]]) -> None:
    """Its id is a pid: once the group is empty, the id may be another's."""
    leader = subprocess.Popen(SLEEPER, stdin=subprocess.PIPE, start_new_session=True)
    children.append(leader)
    members = _group_of(leader.pid)
    assert [pid for pid, _ in members] == [leader.pid]
    assert _still_ours(leader.pid, members)
    leader.kill()
    leader.wait()
    assert _group_of(leader.pid) == set()
    assert not _still_ours(leader.pid, members)
    assert not _still_ours(leader.pid, {(leader.pid, 1)})  # another start time: another

