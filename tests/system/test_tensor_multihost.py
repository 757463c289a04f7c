"""The tensor engine across hosts: ``reduce`` over a ``{hosts: 2, gpus: 2}`` mesh whose hosts
are ``regency worker`` processes in two network namespaces (``_netns``), driven by a
controller in a third: the gloo world's store is on rank 0's host, at the address its peers
reach it by. ``to_mesh`` moves values between the hosts' procs worker to worker.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from _netns import TestNet, module_net, secret_env, start_workers

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(240)

CONTROLLER = """
import sys
import torch
from regency import fetch_shard, reduce
from regency.actor import attach_to_workers
hosts = attach_to_workers(sys.argv[1:3])
procs = hosts.spawn_procs(per_host={"gpus": 2})
print("SIZES", dict(procs.sizes), flush=True)
with procs.activate():
    x = torch.ones(4) * (procs.rank_tensor(("hosts", "gpus")) + 1)
    total = reduce(x, ("hosts", "gpus"))         # 1 + 2 + 3 + 4 on every proc
    across = reduce(x, "hosts")                  # gpus=g: (g + 1) + (g + 3)
    h1 = x.slice_mesh(hosts=1)                   # host 1's values ...
stage = procs.slice(hosts=0)
moved = h1.to_mesh(stage)                        # ... moved to host 0's procs
for h in range(2):
    for g in range(2):
        v = fetch_shard(total, hosts=h, gpus=g).get(timeout=120)
        a = fetch_shard(across, hosts=h, gpus=g).get(timeout=120)
        print("RESULT", h, g, v.tolist()[0], a.tolist()[0], flush=True)
print("MOVED", [fetch_shard(moved, gpus=g).get(timeout=120).tolist()[0] for g in range(2)],
      flush=True)
hosts.shutdown().get(timeout=30)
"""


@pytest.fixture(scope="module")
def net() -> Iterator[TestNet]:
    yield from module_net(2)


def test_reduce_over_a_mesh_of_two_namespace_hosts(net: TestNet, tmp_path: Path) -> None:
    addrs = start_workers(net, 2, 26711, tmp_path, secret_env("tensor-test"))
    (tmp_path / "controller.py").write_text(textwrap.dedent(CONTROLLER))
    res = net.run("ctl", [sys.executable, str(tmp_path / "controller.py"), *addrs],
                  timeout=220, env=secret_env("tensor-test"))
    out = res.stdout + res.stderr
    assert "SIZES {'hosts': 2, 'gpus': 2}" in res.stdout, out
    results = sorted(line.split()[1:] for line in res.stdout.splitlines()
                     if line.startswith("RESULT"))
    assert results == [["0", "0", "10.0", "4.0"], ["0", "1", "10.0", "6.0"],
                       ["1", "0", "10.0", "4.0"], ["1", "1", "10.0", "6.0"]], out
    assert "MOVED [3.0, 4.0]" in res.stdout, out
