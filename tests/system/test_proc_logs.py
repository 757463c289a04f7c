"""``ProcMesh.logs()``: the last lines of each proc's log file, read where the proc runs: on
this host and on a worker host, lines the terminal did not show included, after the procs
exited too."""

from __future__ import annotations

import json
import os

import pytest
from _scripts import describe, kill_tagged, loopback_worker, run_script

SCRIPT = """
import asyncio, json, sys
from regency.actor import Actor, attach_to_workers, current_rank, endpoint, this_host

class Talker(Actor):
    @endpoint
    def talk(self, n: int) -> None:
        rank = current_rank().rank
        for i in range(n):
            print(f"rank {rank} line {i}")
        print(f"rank {rank} complains", file=sys.stderr)

hosts = attach_to_workers(sys.argv[1:]) if sys.argv[1:] else this_host()
procs = hosts.spawn_procs(per_host={"gpus": 2}, name="talkers")
asyncio.run(procs.logging_option(stream_to_client=False))  # the terminal shows none
talkers = procs.spawn("talker", Talker)
talkers.talk.call(50).get()
logs = procs.logs(tail=3)
out = {"of1": logs.of(1), "of_gpus0": logs.of(gpus=0), "stderr": [l.stderr for l in logs],
       "text": str(logs), "none": [l.lines for l in procs.logs(tail=0)],
       "all": len(procs.logs(tail=1000).of(0))}
procs.stop().get()
out["after_stop"] = procs.logs(tail=1).of(1)
try:
    procs.logs(tail=-1)
except ValueError as exc:
    out["negative"] = str(exc)
print("RESULT " + json.dumps(out))
"""


@pytest.mark.parametrize("where", ["this_host", "worker"])
def test_the_last_lines_of_each_proc_come_from_where_it_ran(tmp_path, where) -> None:
    env = {**os.environ, "REGENCY_SECRET": "proc-logs", "PYTHONUNBUFFERED": "1"}
    if where == "this_host":
        run = run_script(tmp_path, SCRIPT, env=env, timeout=90)
    else:
        with loopback_worker(env) as (_, address):
            run = run_script(tmp_path, SCRIPT.replace("sys.argv[1:]", f"[{address!r}]"),
                             env=env, timeout=90)
    try:
        assert run.returncode == 0, describe(run)
        line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))
        out = json.loads(line[7:])
        assert out["of1"] == ["rank 1 line 48", "rank 1 line 49", "rank 1 complains"]
        assert out["of_gpus0"] == ["rank 0 line 48", "rank 0 line 49", "rank 0 complains"]
        assert out["stderr"] == [["rank 0 complains"], ["rank 1 complains"]]
        assert "'gpus': 1}: last 3 lines of " in out["text"]
        assert out["text"].startswith("== talkers {")
        assert "! rank 1 complains" in out["text"]
        assert out["none"] == [[], []] and out["all"] == 51
        assert out["after_stop"] == ["rank 1 complains"]
        assert "tail must be >= 0" in out["negative"]
        assert "rank 0 line" not in run.stdout.replace(line, "")  # not shown, yet kept
    finally:
        kill_tagged(run.tag)
