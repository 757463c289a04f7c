"""``proc_bind`` where the controller runs on fewer CPUs than the job may use (``taskset``,
a batch system's binding): a proc may still be pinned to any CPU its cgroup allows, and a
node binding takes the node's CPUs the job may use."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _scripts import describe, kill_tagged, run_script

CPUS = sorted(os.sched_getaffinity(0))

SCRIPT = """
import json, os
os.sched_setaffinity(0, {FIRST})  # as under `taskset -c FIRST`: procs inherit it
from regency.actor import Actor, endpoint, this_host

class Where(Actor):
    @endpoint
    def cpus(self) -> list[int]:
        return sorted(os.sched_getaffinity(0))

procs = this_host().spawn_procs(per_host={"gpus": 2},
                                proc_bind=[{"cpus": "LAST"}, {"cpunodebind": "0"}])
print("RESULT " + json.dumps(list(procs.spawn("where", Where).cpus.call().get().values())))
procs.stop().get()
"""


@pytest.mark.skipif(len(CPUS) < 2 or not os.path.exists("/sys/devices/system/node/node0"),
                    reason="needs 2 CPUs and NUMA node 0 in /sys")
def test_binding_reaches_past_the_controllers_own_affinity(tmp_path) -> None:
    first, last = CPUS[0], CPUS[-1]
    node0 = set(_expand(Path("/sys/devices/system/node/node0/cpulist").read_text()))
    script = SCRIPT.replace("{FIRST}", f"{{{first}}}").replace("LAST", str(last))
    run = run_script(tmp_path, script, timeout=90)
    try:
        assert run.returncode == 0, describe(run)
        line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))
        pinned, node = json.loads(line[7:])
        assert pinned == [last]
        assert node == sorted(node0 & set(CPUS)) and len(node) > 1, describe(run)
    finally:
        kill_tagged(run.tag)


def _expand(text: str) -> list[int]:
    out = []
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out
