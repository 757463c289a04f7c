"""``output_json``: forwarded lines as JSON objects, one per line, that a log pipeline can
read: who printed it (mesh and coordinates, or the procs of alike lines and their count),
the stream, the line as printed, and when."""

from __future__ import annotations

import json
import os

from _scripts import describe, kill_tagged, run_script

SCRIPT = """
import asyncio, sys
from regency import config
from regency.actor import Actor, current_rank, endpoint, this_host

config.configure(output_json=True)

class Talker(Actor):
    @endpoint
    def talk(self) -> None:
        print(f'{{"step": 1, "rank": {current_rank().rank}}}')   # a structured line
        print("warning: slow", file=sys.stderr)

procs = this_host().spawn_procs(per_host={"gpus": 2}, name="talkers")
procs.spawn("talker", Talker).talk.call().get()
alike = this_host().spawn_procs(per_host={"gpus": 3}, name="alike procs")  # a space too
asyncio.run(alike.logging_option(aggregate_window_sec=60))  # longer than the run: the
# three procs' lines are one group, shown at exit, however slowly they came
alike.spawn("talker", Talker).talk.call().get()
alike.stop().get()
procs.stop().get()
print("done")
"""


def test_forwarded_lines_are_json_objects(tmp_path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    run = run_script(tmp_path, SCRIPT, env=env, timeout=90)
    try:
        assert run.returncode == 0, describe(run)
        out = [json.loads(ln) for ln in run.stdout.splitlines() if ln.startswith("{")]
        err = [json.loads(ln) for ln in run.stderr.splitlines() if ln.startswith("{")]
        mine = sorted((r["coords"]["gpus"], json.loads(r["line"])["rank"])
                      for r in out if r.get("mesh") == "talkers")
        assert mine == [(0, 0), (1, 1)], describe(run)
        assert all(r["stream"] == "stdout" and r["ts"] > 0 for r in out)
        warned = [r for r in err if r.get("mesh") == "talkers"]
        assert len(warned) == 2 and warned[0]["stream"] == "stderr", describe(run)
        assert warned[0]["line"] == "warning: slow"
        grouped = [{**r, "procs": sorted(r["procs"], key=lambda p: p["coords"]["gpus"])}
                   for r in err if "procs" in r]
        alike = [{"mesh": "alike procs", "coords": {"gpus": i}} for i in range(3)]
        assert [(r["count"], r["procs"], r["line"]) for r in grouped] == [
            (3, alike, "warning: slow")], describe(run)
        assert [(r["count"], sorted(r["procs"], key=lambda p: p["coords"]["gpus"]))
                for r in out if "procs" in r] == [(3, alike)], describe(run)
        assert "done" in run.stdout.splitlines()  # the controller's own lines stay as they are
    finally:
        kill_tagged(run.tag)
