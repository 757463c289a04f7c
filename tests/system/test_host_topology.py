"""Worker hosts describe themselves (``HostMesh.topology()``) with the labels their operator
gave them (``--label``, ``REGENCY_HOST_LABELS``), and ``group_by`` arranges them by those
labels; a machine of two NUMA nodes and two GPUs is described from its ``/sys`` tree."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _scripts import describe, kill_tagged, loopback_worker, run_script

SCRIPT = """
import json, sys
from regency.actor import Actor, attach_to_workers, current_rank, endpoint

class Here(Actor):
    @endpoint
    def where(self) -> str:
        import os
        return os.environ["REGENCY_HOST_LABELS"]

hosts = attach_to_workers(sys.argv[1:])
topo = hosts.topology()
out = {"labels": [h.labels for h in topo], "numa": [h.numa for h in topo],
       "gpus": [h.gpus for h in topo], "table": str(topo), "racks": topo.labels("rack")}
by_rack = hosts.group_by("rack")
out["sizes"] = dict(by_rack.sizes)
out["values"] = by_rack.label_values
out["sliced"] = [by_rack.slice(rack=slice(1, 2)).label_values,
                 by_rack.slice(hosts=1).label_values]
try:
    by_rack.shutdown()
except RuntimeError as exc:
    out["shutdown"] = str(exc)
procs = by_rack.spawn_procs(per_host={"gpus": 1})
out["where"] = {str(dict(p)): v for p, v in procs.spawn("h", Here).where.call().get().items()}
for labels in (("zone",), ("rack", "zone"), ("hosts",)):
    try:
        hosts.group_by(*labels)
    except ValueError as exc:
        out[",".join(labels)] = str(exc)
print("RESULT " + json.dumps(out))
"""


def _two_node_sys(root: Path) -> None:
    for n, cpus in ((0, "0"), (1, "1")):
        (root / "devices" / "system" / "node" / f"node{n}").mkdir(parents=True)
        (root / "devices" / "system" / "node" / f"node{n}" / "cpulist").write_text(cpus)
    for name, node in (("0000:17:00.0", "0"), ("0000:ca:00.0", "1")):
        dev = root / "bus" / "pci" / "devices" / name
        dev.mkdir(parents=True)
        (dev / "class").write_text("0x030200\n")
        (dev / "vendor").write_text("0x10de\n")
        (dev / "numa_node").write_text(node + "\n")


def test_hosts_describe_themselves_and_group_by_their_labels(tmp_path: Path) -> None:
    env = {**os.environ, "REGENCY_SECRET": "topology", "PYTHONUNBUFFERED": "1"}
    fake = tmp_path / "sys"
    _two_node_sys(fake)
    racks = ["b", "a", "b", "a"]
    with contextlib.ExitStack() as stack:
        workers = []
        for i, rack in enumerate(racks):
            wenv = {**env, "REGENCY_HOST_LABELS": f"zone=z{i},rack=env",  # --label wins
                    "SLURM_TOPOLOGY_ADDR": f"core.leaf{i % 2}.node{i}",
                    "SLURM_TOPOLOGY_ADDR_PATTERN": "switch.switch.node"}
            if i == 0:
                wenv["REGENCY_SYSFS_ROOT"] = str(fake)
            _, address = stack.enter_context(loopback_worker(wenv, "--label", f"rack={rack}"))
            workers.append(address)
        run = run_script(tmp_path, SCRIPT.replace("sys.argv[1:]", repr(workers)), env=env,
                         timeout=90)
    try:
        assert run.returncode == 0, describe(run)
        out = json.loads(next(ln for ln in run.stdout.splitlines()
                              if ln.startswith("RESULT "))[7:])
        assert out["labels"] == [{"switch": f"leaf{i % 2}", "switch2": "core", "zone": f"z{i}",
                                  "rack": r} for i, r in enumerate(racks)]
        assert out["racks"] == racks
        assert out["numa"][0] == {"0": [0], "1": [1]} or len(os.sched_getaffinity(0)) < 2
        assert [g["numa"] for g in out["gpus"][0]] == [0, 1]
        assert out["gpus"][1:] == [[], [], []] or Path("/sys/bus/pci").exists()
        assert "rack=b;switch=leaf0;switch2=core;zone=z0" in out["table"]
        assert "nvidia0@0;nvidia1@1" in out["table"] and "0:0;1:1" in out["table"]
        assert out["sizes"] == {"rack": 2, "hosts": 2}
        assert out["values"] == {"rack": ["a", "b"]}
        assert out["sliced"] == [{"rack": ["b"]}, {"rack": ["a", "b"]}]
        assert "reference" in out["shutdown"]  # the workers are the mesh's it came from
        # rack a holds workers 1 and 3: its procs run there, in that order
        assert [v.split(",")[0] for v in out["where"].values()] == ["zone=z1", "zone=z3",
                                                                    "zone=z0", "zone=z2"]
        assert "every combination" in out["rack,zone"]
        assert "not 'hosts'" in out["hosts"]
        assert "zone" not in out  # four zones of one host each: a valid arrangement
    finally:
        kill_tagged(run.tag)


@pytest.mark.parametrize(("args", "labels", "says"), [
    (["--label", "rack"], "", "is not key=value (e.g. rack=r1,zone=a"),
    ([], "rack", "is not key=value"),
    (["--label", "rack=r1", "--label", "rack=r2"], "", "'rack' is given twice"),
    ([], "hosts=x", "'hosts' is the name of a host mesh's own dimension"),
    (["--label", "note=a,b"], "", "a label holds no ','"),
])
def test_a_malformed_label_stops_the_worker_saying_why(args: list[str], labels: str,
                                                       says: str) -> None:
    env = {**os.environ, "REGENCY_SECRET": "topology", "REGENCY_HOST_LABELS": labels}
    run = subprocess.run([sys.executable, "-m", "regency", "worker", "--listen",
                          "tcp://127.0.0.1:0", *args], env=env, text=True,
                         capture_output=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert says in run.stderr
