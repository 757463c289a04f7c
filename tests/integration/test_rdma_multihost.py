"""RDMABuffer across "hosts": workers and the controller in network namespaces of their own.

Each host is a real ``regency worker`` in its own network namespace (``tests/system/_netns``),
reached over TCP across a bridge; the controller runs this file as a script in another
namespace and prints one JSON line of results. The namespaces share one kernel and pid
namespace, so the automatic choice is still ``vm`` (correctly: one kernel); the TCP path
between hosts is checked by forcing it, and by refusing ``vm`` (then ``unix`` is impossible
across network namespaces, and the choice must be ``tcp``). Skipped where namespaces cannot
be made (not root, no ``ip``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PORT = 26700
SECRET = "rdma-multihost-secret"
MiB = 1 << 20


def _controller(workers: list[str]) -> int:  # pragma: no cover - runs in a subprocess
    import regency.actor as ra
    from regency.rdma import RDMABuffer

    sys.path.insert(0, str(HERE))
    from _rdma_actors import Holder, digest, pattern

    ra.unhandled_fault_hook = lambda failure: print(failure.report(), file=sys.stderr)
    out: dict[str, Any] = {}
    early = RDMABuffer(bytearray(10))  # registered before the controller is reachable by TCP
    out["early_tcp"] = early._desc.tcp
    hosts = ra.attach_to_workers(workers)
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    holders = procs.spawn("holder", Holder)
    a, b = holders.slice(hosts=0, gpus=0), holders.slice(hosts=1, gpus=0)
    buf = a.make.call_one("w", "numpy", 16 * MiB, 5).get(timeout=30)
    want = digest(pattern(16 * MiB, 5))
    out["owner_tcp"] = buf._desc.tcp
    out["auto"] = b.transport.call_one(buf).get(timeout=30)
    out["b_reads_tcp"] = b.read.call_one(buf, "tcp").get(timeout=30) == want
    out["b_reads_auto"] = b.read.call_one(buf).get(timeout=30) == want
    out["b_unix"] = b.read_error.call_one(buf, "unix").get(timeout=30)
    b.write.call_one(buf, 16 * MiB, 6, "tcp").get(timeout=30)
    out["a_after_write"] = a.digest.call_one("w").get(timeout=30) == digest(pattern(16 * MiB, 6))
    os.environ["REGENCY_RDMA_DENY_VM"] = "1"  # as if ptrace rules refused: tcp, never unix
    dst = bytearray(16 * MiB)
    buf.read_into(dst).get(timeout=30)
    out["ctl_denied_choice"] = list(buf.transport_for())
    out["ctl_reads"] = digest(dst) == digest(pattern(16 * MiB, 6))
    del os.environ["REGENCY_RDMA_DENY_VM"]
    mine = pattern(MiB, 9)
    local = RDMABuffer(mine)  # owned by the controller, reached over the bridge
    out["ctl_owner_tcp"] = local._desc.tcp
    out["a_reads_ctl_tcp"] = a.read.call_one(local, "tcp").get(timeout=30) == digest(mine)
    buf.drop().get(timeout=30)
    out["dropped"] = b.read_error.call_one(buf, "tcp").get(timeout=30)
    hosts.shutdown().get(timeout=60)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_controller(sys.argv[1:]))


# -- the test side --------------------------------------------------------------------------------
import pytest  # noqa: E402

sys.path.insert(0, str(HERE.parent / "system"))
from _netns import netns_problem, test_network  # noqa: E402

_why = netns_problem()
pytestmark = [
    pytest.mark.skipif(_why is not None, reason=f"network namespaces unavailable: {_why}"),
    pytest.mark.timeout(120),
]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("REGENCY_SECRET", "REGENCY_RDMA"))}
    env.update({"REGENCY_SECRET": SECRET, "PYTHONUNBUFFERED": "1"})
    # a worker's procs start with the worker's own sys.path (not the controller's): give
    # it the test helpers, as one installs a program's modules on every host
    here = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    return env


def _wait_listening(proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while "listening on" not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"worker exited early:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"worker did not listen:\n{log.read_text()}"
        time.sleep(0.02)


def test_rdma_between_hosts(tmp_path: Path) -> None:
    with test_network(2) as net:
        workers, logs = [], []
        try:
            for i, node in enumerate(net.hosts):
                log = tmp_path / f"worker{i}.log"
                with open(log, "wb") as f:
                    workers.append(net.popen(i, [sys.executable, "-m", "regency", "worker",
                                                 "--listen", f"tcp://{node.ip}:{PORT}"],
                                             stdout=f, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, env=_env()))
                logs.append(log)
            for proc, log in zip(workers, logs):
                _wait_listening(proc, log)
            addrs = [f"tcp://{n.ip}:{PORT}" for n in net.hosts]
            ctl = net.run("ctl", [sys.executable, __file__, *addrs], timeout=90, env=_env())
            assert ctl.returncode == 0, ctl.stderr[-4000:]
            res = json.loads(ctl.stdout.strip().splitlines()[-1])
        finally:
            for proc in workers:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(timeout=10)
    ips = [n.ip for n in net.hosts]
    assert res["owner_tcp"].startswith(f"tcp:{ips[0]}:"), res  # the owner host's address
    assert res["auto"][0] == "vm", res  # one kernel, one pid namespace
    assert res["b_reads_tcp"] and res["b_reads_auto"] and res["a_after_write"], res
    assert "not usable" in res["b_unix"] or "network namespace" in res["b_unix"], res
    assert res["ctl_denied_choice"][0] == "tcp" and "EPERM" in res["ctl_denied_choice"][1], res
    assert res["ctl_reads"], res
    assert res["early_tcp"].startswith("tcp:127.0.0.1:"), res
    assert res["ctl_owner_tcp"].startswith("tcp:10."), res  # listens where workers reach it
    assert res["a_reads_ctl_tcp"], res
    assert "BufferDroppedError" in res["dropped"], res
