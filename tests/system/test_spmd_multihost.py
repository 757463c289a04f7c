"""SPMD across hosts: an unmodified gloo all-reduce script on a ``{hosts: 2, gpus: 2}`` mesh
whose hosts are ``regency worker`` processes in two network namespaces (``_netns``), driven by
a controller in a third; and ``regency exec --spmd`` on one machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from _netns import TestNet, module_net, secret_env, start_workers

pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parent / "spmd" / "allreduce.py"
pytestmark = pytest.mark.timeout(240)

CONTROLLER = """
import sys
from regency.actor import attach_to_workers
from regency.spmd import run_spmd
hosts = attach_to_workers(sys.argv[1:3])
procs = hosts.spawn_procs(per_host={"gpus": 2})
codes = run_spmd(procs, [sys.argv[3], sys.argv[4]], timeout=180)
print("CODES", [c for _, c in codes.items()], flush=True)
hosts.shutdown().get(timeout=30)
"""


@pytest.fixture(scope="module")
def net() -> Iterator[TestNet]:
    yield from module_net(2)


def test_gloo_all_reduce_on_two_namespace_hosts(net: TestNet, tmp_path: Path) -> None:
    addrs = start_workers(net, 2, 26611, tmp_path, secret_env("spmd-test"))
    (tmp_path / "controller.py").write_text(textwrap.dedent(CONTROLLER))
    res = net.run("ctl", [sys.executable, str(tmp_path / "controller.py"), *addrs,
                          str(SCRIPT), str(tmp_path)], timeout=220, env=secret_env("spmd-test"))
    assert "CODES [0, 0, 0, 0]" in res.stdout, res.stdout + res.stderr
    outs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert [o["sum"] for o in outs] == [10.0] * 4  # 1 + 2 + 3 + 4
    assert [o["env"]["LOCAL_RANK"] for o in outs] == ["0", "1", "0", "1"]
    assert [o["env"]["GROUP_RANK"] for o in outs] == ["0", "0", "1", "1"]
    assert {o["env"]["MASTER_ADDR"] for o in outs} == {net.node(0).ip}  # the all-zero rank
    assert {o["env"]["WORLD_SIZE"] for o in outs} == {"4"}


def test_regency_exec_spmd(tmp_path: Path) -> None:
    (tmp_path / "jobs.py").write_text("from regency.job import ProcessJob\n"
                                      "job = ProcessJob({'hosts': 1})\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
    env.update({"REGENCY_JOB_CACHE": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"})

    def regency(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "regency", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=200)

    assert regency("apply", "jobs.job").returncode == 0
    try:
        res = regency("exec", "--spmd", "--per-host", "gpus=2", "--", str(SCRIPT),
                      str(tmp_path))
        assert res.returncode == 0, res.stdout + res.stderr
        assert "all_reduce -> 3.0" in res.stdout
        assert res.stderr.count(": exit 0") == 2
    finally:
        regency("kill")

