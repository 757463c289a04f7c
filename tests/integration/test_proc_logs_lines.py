"""``ProcMesh.logs()`` in one process: a respawned rank's earlier proc, lines holding
carriage returns and other separators, the arguments checked."""

from __future__ import annotations

import os
import signal
import sys

import pytest

import regency.actor as ra
from regency.actor import Actor, endpoint, this_host
from regency.errors import SupervisionError

T = 30


class Talker(Actor):
    @endpoint
    def say(self, text: str, err: bool = False) -> int:
        print(text, file=sys.stderr if err else sys.stdout, flush=True)
        return os.getpid()


def test_a_respawned_ranks_earlier_output_is_kept() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="crashy")
    seen: list[object] = []
    before, ra.unhandled_fault_hook = ra.unhandled_fault_hook, seen.append
    try:
        talkers = procs.spawn("talker", Talker)
        pid = talkers.slice(gpus=1).say.call_one("about to crash: CUDA error 700",
                                                 True).get(timeout=T)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(SupervisionError):
            talkers.slice(gpus=1).say.call_one("never").get(timeout=T)
        assert procs.respawn() == [1]
        talkers.slice(gpus=1).say.call_one("back again").get(timeout=T)
        log = next(entry for entry in procs.logs() if entry.rank == 1)
        assert log.lines == ["back again"]
        assert [e.stderr for e in log.earlier] == [["about to crash: CUDA error 700"]]
        assert "(before a respawn)" in str(procs.logs())
    finally:
        ra.unhandled_fault_hook = before
        procs.stop().get(timeout=T)


def test_lines_end_at_newlines_only() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="bars")
    try:
        talker = procs.spawn("talker", Talker)
        talker.say.call_one("10%\r50%\r100%", True).get(timeout=T)  # a progress bar
        talker.say.call_one("a\x0cb\u2028c").get(timeout=T)
        logs = procs.logs(tail=2)
        assert logs.of(0) == ["10%\r50%\r100%", "a\x0cb\u2028c"]
        assert [log.stderr for log in logs] == [["10%\r50%\r100%"]]
        with pytest.raises(ValueError, match="timeout must be > 0"):
            procs.logs(timeout=0)
        with pytest.raises(ValueError, match="tail must be >= 0"):
            procs.logs(tail=-1)
    finally:
        procs.stop().get(timeout=T)


class Own(Talker):
    @endpoint
    def own_lines(self) -> list[str]:
        return ra.this_proc().logs(tail=1).of(0)


def test_this_proc_reads_its_own_log_and_the_controller_says_it_has_none() -> None:
    here = ra.this_proc().logs()
    assert len(here) == 0 and "this is the controller" in here.missing[0]
    assert "goes to your terminal" in str(here)
    procs = this_host().spawn_procs(name="own")
    try:
        own = procs.spawn("own", Own)
        own.say.call_one("said in the proc").get(timeout=T)  # its reply waits for the line
        assert own.own_lines.call_one().get(timeout=T) == ["said in the proc"]
    finally:
        procs.stop().get(timeout=T)
