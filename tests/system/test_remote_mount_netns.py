"""``remotemount`` across network namespaces: three ``regency worker`` hosts, each in a
namespace of its own on a private bridge, and the controller in a fourth (``_netns``).

Every host reads the same file through its mount; the controller reads and casts each block
once, down the relay chain, so what it sends (its sockets' acknowledged bytes, read with
``ss`` in its namespace) is about one copy of the file, not three. Skips without FUSE or
namespaces.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from _netns import TestNet, module_net, start_workers

from regency.remotemount import fuse_available

if fuse_available() is not None:
    pytest.skip(f"no FUSE here: {fuse_available()}", allow_module_level=True)
pytestmark = pytest.mark.timeout(240)
SECRET = "remote-mount-netns"
HOSTS = 3

CONTROLLER = """
import hashlib, json, os, re, subprocess, sys
from regency.actor import Actor, attach_to_workers, current_rank, endpoint
from regency.remotemount import remotemount

class Reader(Actor):
    @endpoint
    def read(self, mnt):
        key = "_".join(f"{k}_{v}" for k, v in dict(current_rank()).items())
        with open(os.path.join(mnt.replace("$SUBDIR", key), "big.bin"), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

def sent_bytes():
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True).stdout
    total, mine = 0, False
    for line in out.splitlines():
        if not line.startswith((" ", "\\t")):
            mine = f"pid={os.getpid()}," in line
        elif mine:
            m = re.search(r"bytes_acked:(\\d+)", line)
            total += int(m.group(1)) if m else 0
    return total

src, mnt, addrs = sys.argv[1], sys.argv[2], sys.argv[3:]
hosts = attach_to_workers(addrs)
handler = remotemount(hosts, src, mnt).open()
readers = hosts.spawn_procs(name="readers").spawn("readers", Reader)
before = sent_bytes()
digests = [v for _, v in readers.read.call(mnt).get(timeout=180).items()]
after = sent_bytes()
out = {"digests": digests, "sent": after - before, "stats": handler.stats(),
       "mountpoints": handler.mountpoints}
handler.close()
print("RESULT " + json.dumps(out), flush=True)
hosts.shutdown().get(timeout=30)
"""


@pytest.fixture(scope="module")
def net() -> Iterator[TestNet]:
    yield from module_net(HOSTS)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
    env.update({"REGENCY_SECRET": SECRET, "PYTHONUNBUFFERED": "1"})
    return env


def test_hosts_in_namespaces_read_one_file_for_one_copy_sent(net: TestNet,
                                                             tmp_path: Path) -> None:
    addrs = start_workers(net, HOSTS, 26652, tmp_path, _env())
    src = tmp_path / "src"
    src.mkdir()
    big = os.urandom(9 << 20)  # three 4 MiB blocks
    (src / "big.bin").write_bytes(big)
    (tmp_path / "controller.py").write_text(textwrap.dedent(CONTROLLER))
    res = net.run("ctl", [sys.executable, str(tmp_path / "controller.py"), str(src),
                          f"{tmp_path / 'mnt'}/$SUBDIR", *addrs], timeout=220, env=_env())
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, res.stdout + res.stderr
    out = json.loads(line[len("RESULT "):])
    assert out["digests"] == [hashlib.sha256(big).hexdigest()] * HOSTS
    assert out["stats"] == {"blocks": 3, "bytes": len(big)}  # read and cast once each
    # down the relay chain: about one copy left the controller for three hosts' reads
    assert len(big) <= out["sent"] < 1.3 * len(big), out["sent"] / len(big)
