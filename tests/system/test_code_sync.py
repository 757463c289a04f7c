"""``HostMesh.sync_workspace``: only changed files travel, deletions follow, modules reload.

Two ``regency worker`` hosts on this machine, each with its own workspace root
(``REGENCY_WORKSPACE_DIR``), and a controller script that syncs and reports.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)
SECRET = "code-sync-test"

CONTROLLER = """
import asyncio, json, os, sys, time
from pathlib import Path
from regency.actor import Actor, attach_to_workers, endpoint
from regency.workspace import Workspace

class Reader(Actor):
    @endpoint
    def value(self):
        sys.path.insert(0, os.path.join(os.environ["REGENCY_WORKSPACE_DIR"], "proj"))
        import settings
        return settings.VALUE

src = Path(sys.argv[3])
hosts = attach_to_workers(sys.argv[1:3])
ws = Workspace(dirs=[str(src)])
out = {}
out["first"] = asyncio.run(hosts.sync_workspace(ws))
out["again"] = asyncio.run(hosts.sync_workspace(ws))
readers = hosts.spawn_procs(name="readers").spawn("readers", Reader)
out["value_before"] = [v for _, v in readers.value.call().get(timeout=60).items()]
(src / "settings.py").write_text("VALUE = 2\\n")
(src / "pkg" / "gone.txt").unlink()
t0 = time.monotonic()
out["changed"] = asyncio.run(hosts.sync_workspace(ws, auto_reload=True))
out["changed_s"] = time.monotonic() - t0
out["value_after"] = [v for _, v in readers.value.call().get(timeout=60).items()]
try:
    hosts.sync_workspace(ws).get()
except AttributeError as exc:
    out["get"] = str(exc)
print("RESULT " + json.dumps(out), flush=True)
hosts.shutdown().get(timeout=30)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[tuple[str, Path]]]:
    """Two workers on loopback, each with its own workspace root."""
    procs, out = [], []
    for i in range(2):
        root = tmp_path / f"root{i}"
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
        env.update({"REGENCY_SECRET": SECRET, "REGENCY_WORKSPACE_DIR": str(root)})
        p = subprocess.Popen([sys.executable, "-m", "regency", "worker", "--listen",
                              f"tcp://127.0.0.1:{port}"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        assert p.stdout is not None and "listening" in p.stdout.readline()
        procs.append(p)
        out.append((f"tcp://127.0.0.1:{port}", root))
    yield out
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)


def test_sync_sends_only_what_changed_and_reloads(workers: list[tuple[str, Path]],
                                                   tmp_path: Path) -> None:
    src = tmp_path / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "settings.py").write_text("VALUE = 1\n")
    (src / "pkg" / "gone.txt").write_text("to be deleted")
    for i in range(20):
        (src / "pkg" / f"data{i}.bin").write_bytes(os.urandom(1000 + i))
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    (tmp_path / "controller.py").write_text(textwrap.dedent(CONTROLLER))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
    env["REGENCY_SECRET"] = SECRET
    res = subprocess.run([sys.executable, str(tmp_path / "controller.py"),
                          workers[0][0], workers[1][0], str(src)], env=env,
                         capture_output=True, text=True, timeout=170)
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, res.stdout + res.stderr
    out = json.loads(line[len("RESULT "):])
    assert out["first"]["files"] == [23, 23] and out["first"]["deleted"] == [0, 0]
    assert out["again"]["files"] == [0, 0] and out["again"]["bytes"] == [0, 0]
    assert out["changed"]["files"] == [1, 1] and out["changed"]["deleted"] == [1, 1]
    assert out["changed"]["changed"] == ["proj/pkg/gone.txt", "proj/settings.py"]
    assert "settings" in out["changed"]["reloaded"]
    assert out["value_before"] == [1, 1] and out["value_after"] == [2, 2]
    assert "get" in out["get"] or "coroutine" in out["get"]
    for _, root in workers:
        copy = root / "proj"
        assert (copy / "settings.py").read_text() == "VALUE = 2\n"
        assert not (copy / "pkg" / "gone.txt").exists()
        assert (copy / "pkg" / "data7.bin").read_bytes() == (src / "pkg" / "data7.bin"
                                                             ).read_bytes()
        assert os.access(copy / "run.sh", os.X_OK)


def test_a_workspace_names_what_is_wrong(tmp_path: Path) -> None:
    from regency.workspace import Workspace

    with pytest.raises(ValueError, match="is not a directory"):
        Workspace(dirs=[str(tmp_path / "missing")]).targets()
    with pytest.raises(ValueError, match="must be a relative path"):
        Workspace(dirs={str(tmp_path): "../up"}).targets()


PROC_MESH_CONTROLLER = """
import asyncio, json, sys
from regency.actor import this_host
from regency.workspace import Workspace

procs = this_host().spawn_procs(per_host={"procs": 2})
ws = Workspace(dirs=[sys.argv[1]])
first = asyncio.run(procs.sync_workspace(ws))
again = asyncio.run(procs.sync_workspace(ws))
print("RESULT " + json.dumps({"first": first["files"], "again": again["files"]}), flush=True)
procs.stop().get(timeout=30)
"""


def test_a_proc_mesh_syncs_the_hosts_of_its_procs(tmp_path: Path) -> None:
    """``ProcMesh.sync_workspace`` (Monarch has it too): the one host of a 2-proc mesh on
    this machine gets the files once, and nothing the second time."""
    src = tmp_path / "proj"
    src.mkdir()
    (src / "a.py").write_text("A = 1\n")
    (tmp_path / "controller.py").write_text(textwrap.dedent(PROC_MESH_CONTROLLER))
    env = {**os.environ, "REGENCY_WORKSPACE_DIR": str(tmp_path / "root")}
    res = subprocess.run([sys.executable, str(tmp_path / "controller.py"), str(src)],
                         env=env, capture_output=True, text=True, timeout=170)
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, res.stdout + res.stderr
    assert json.loads(line[len("RESULT "):]) == {"first": [1], "again": [0]}
    assert (tmp_path / "root" / "proj" / "a.py").read_text() == "A = 1\n"
