"""Log lines of a proc on a worker host (not the controller's) are recorded with the
proc's address, like a local proc's (issue 16): the worker's host agent says whose lines it
forwards. The worker is a real ``regency worker`` on loopback TCP."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from _scripts import loopback_worker

CONTROLLER = r"""
import glob, sqlite3, sys, time
from regency import config
from regency.actor import Actor, attach_to_workers, context, endpoint

folder, address = sys.argv[1], sys.argv[2]
config.configure(observe=True, observe_dir=folder)

class Talker(Actor):
    @endpoint
    def talk(self) -> str:
        print("printed on the worker host", flush=True)
        return context().actor_instance.proc_id

hosts = attach_to_workers([address])
procs = hosts.spawn_procs(per_host={"procs": 1}, name="remote")
talker = procs.spawn("talker", Talker)
talker.talk.call_one().get(timeout=60)
[path] = glob.glob(f"{folder}/*.db")
db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
deadline = time.monotonic() + 60  # the line is forwarded after the call returns, and the
while not (db.execute("SELECT 1 FROM logs WHERE line = 'printed on the worker host'").fetchone()
           and db.execute("SELECT 1 FROM procs WHERE mesh_name = 'remote'").fetchone()):
    assert time.monotonic() < deadline, "the worker's line or proc never reached the store"
    time.sleep(0.1)  # proc's own rows come in its next batch
print("LOGGED", flush=True)
hosts.shutdown()
"""


def test_a_worker_hosts_proc_lines_carry_its_address(tmp_path: Path) -> None:
    env = {**os.environ, "REGENCY_SECRET": "observe-worker-logs", "PYTHONUNBUFFERED": "1"}
    folder = tmp_path / "jobs"
    with loopback_worker(env) as (worker, address):
        run = subprocess.run([sys.executable, "-c", CONTROLLER, str(folder), address],
                             capture_output=True, text=True, env=env, timeout=120,
                             cwd=tmp_path)
        assert run.returncode == 0 and "LOGGED" in run.stdout, run.stdout + run.stderr
        assert worker.wait(timeout=30) == 0  # shutdown() made it exit
    [db_file] = folder.glob("*.db")
    db = sqlite3.connect(f"file:{db_file}?mode=ro", uri=True)
    [(proc, label)] = db.execute(
        "SELECT proc, label FROM logs WHERE line = 'printed on the worker host'").fetchall()
    assert "tcp:127.0.0.1:" in proc, proc  # a proc of the worker host, reached over TCP
    [(mesh_name, rank)] = db.execute("SELECT mesh_name, rank FROM procs WHERE proc = ?",
                                     (proc,)).fetchall()
    assert (mesh_name, rank) == ("remote", 0)
    assert "remote" in label
