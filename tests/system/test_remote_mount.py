"""``remotemount``: a controller's directory, read-only through FUSE, on two hosts.

Two ``regency worker`` hosts on loopback (as in ``test_code_sync``); procs on both read the
same file through their host's mount; each block is read and cast by the controller once;
closing leaves nothing mounted and no mount proc behind. Skips without FUSE or ``mfusepy``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from regency.remotemount import fuse_available

# mfusepy raises OSError, not ImportError, when libfuse is missing: fuse_available() checks
# the binding, /dev/fuse and fusermount3 alike
if fuse_available() is not None:
    pytest.skip(f"no FUSE here: {fuse_available()}", allow_module_level=True)
pytestmark = pytest.mark.timeout(180)
SECRET = "remote-mount-test"

CONTROLLER = """
import errno, hashlib, json, os, sys
from regency.actor import Actor, attach_to_workers, current_rank, endpoint
from regency.gather_mount import gather_mount
from regency.remotemount import remotemount

class Reader(Actor):
    @endpoint
    def read(self, mnt):
        host = "_".join(f"{k}_{v}" for k, v in dict(current_rank()).items() if k == "hosts")
        root = mnt.replace("$SUBDIR", host)
        with open(os.path.join(root, "big.bin"), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        small = open(os.path.join(root, "pkg", "small.txt")).read()
        try:
            open(os.path.join(root, "new.txt"), "w")
            wrote = "yes"
        except OSError as exc:
            wrote = errno.errorcode[exc.errno]
        return {"sha": digest, "small": small, "ls": sorted(os.listdir(root)), "wrote": wrote}

src, mnt = sys.argv[3], sys.argv[4]
hosts = attach_to_workers(sys.argv[1:3])
try:
    remotemount(hosts, src, os.path.join(src, "big.bin", "under-a-file")).open()
except Exception as exc:
    bad_mount = type(exc).__name__ + ": " + str(exc)
handler = remotemount(hosts, src, mnt).open()
gathered = gather_mount(hosts, mnt, sys.argv[5])
back = {k: open(os.path.join(sys.argv[5], k, "pkg", "small.txt")).read()
        for k in sorted(os.listdir(sys.argv[5]))}
gathered.close()
procs = hosts.spawn_procs(per_host={"procs": 2})
got = procs.spawn("readers", Reader).read.call(mnt).get(timeout=120)
procs.stop().get(timeout=60)
out = {"reads": [v for _, v in got.items()], "stats": handler.stats(),
       "mountpoints": handler.mountpoints, "pids": handler.pids, "back": back,
       "bad_mount": bad_mount}
handler.close()
print("RESULT " + json.dumps(out), flush=True)
hosts.shutdown().get(timeout=30)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def workers() -> Iterator[list[str]]:
    procs, out = [], []
    for _ in range(2):
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
        env["REGENCY_SECRET"] = SECRET
        p = subprocess.Popen([sys.executable, "-m", "regency", "worker", "--listen",
                              f"tcp://127.0.0.1:{port}"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        assert p.stdout is not None and "listening" in p.stdout.readline()
        procs.append(p)
        out.append(f"tcp://127.0.0.1:{port}")
    yield out
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
    except OSError:
        return True


def _mounted_under(path: Path) -> list[str]:
    return [line for line in Path("/proc/mounts").read_text().splitlines()
            if str(path) in line]


def _fuse_helpers(path: Path) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "fusermount" in cmd and str(path) in cmd:
            out.append(cmd)
    return out


def test_two_hosts_read_one_file_through_their_mounts(workers: list[str],
                                                      tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    big = os.urandom(9 << 20)  # three 4 MiB blocks
    (src / "big.bin").write_bytes(big)
    (src / "pkg" / "small.txt").write_text("hello from the controller\n")
    mnt = tmp_path / "mnt"
    (tmp_path / "controller.py").write_text(textwrap.dedent(CONTROLLER))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
    env["REGENCY_SECRET"] = SECRET
    res = subprocess.run([sys.executable, str(tmp_path / "controller.py"), *workers,
                          str(src), f"{mnt}/$SUBDIR", str(tmp_path / "back")], env=env,
                         capture_output=True, text=True, timeout=170)
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, res.stdout + res.stderr
    out = json.loads(line[len("RESULT "):])
    assert sorted(out["mountpoints"]) == [f"{mnt}/hosts_0", f"{mnt}/hosts_1"]
    want = hashlib.sha256(big).hexdigest()
    assert len(out["reads"]) == 4
    for read in out["reads"]:
        assert read == {"sha": want, "small": "hello from the controller\n",
                        "ls": ["big.bin", "pkg"], "wrote": "EROFS"}
    # four procs on two hosts read 3 + 1 blocks: the controller read and cast each once
    small = len((src / "pkg" / "small.txt").read_bytes())
    assert out["stats"] == {"blocks": 4, "bytes": len(big) + small}
    assert "big.bin/under-a-file" in out["bad_mount"]  # a mount point that cannot be made
    # gather_mount: each host's mount point, shown back here under its key
    assert out["back"] == {"hosts_0": "hello from the controller\n",
                           "hosts_1": "hello from the controller\n"}
    assert _mounted_under(mnt) == [] and _mounted_under(tmp_path / "back") == []
    assert all(_gone(pid) for pid in out["pids"])
    deadline = time.monotonic() + 60  # libfuse's auto-unmount helper exits after its proc
    while _fuse_helpers(mnt) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _fuse_helpers(mnt) == []


def test_remotemount_names_a_bad_source(tmp_path: Path) -> None:
    from regency.remotemount import remotemount

    with pytest.raises(ValueError, match="is not a directory"):
        remotemount(None, str(tmp_path / "missing"))


JOB_CONTROLLER = """
import json, os, sys
from regency.actor import Actor, endpoint
from regency.job import LocalJob

class Reader(Actor):
    @endpoint
    def read(self, paths):
        return [open(p).read() for p in paths]

src, mnt, cache = sys.argv[1:4]
job = LocalJob(hosts=2, name="mounted", cache_dir=cache)
job.remote_mount(src, mnt + "/$SUBDIR")
job.gather_mount(mnt + "/$SUBDIR", mnt + "-back")
hosts = job.state(cached_path=None).hosts
pids = [pid for h in job._mount_handles for pid in getattr(h, "pids", [])]
procs = hosts.spawn_procs()
got = procs.spawn("r", Reader).read.call([mnt + "/hosts_0/a.txt", mnt + "/hosts_1/a.txt"])
out = {"reads": [v for _, v in got.get(timeout=120).items()], "pids": pids,
       "back": sorted(os.listdir(mnt + "-back")),
       "back_a": open(mnt + "-back/hosts_1/a.txt").read()}
try:
    job.remote_mount(src, meshes=["nope"])
except ValueError as exc:
    out["bad_mesh"] = str(exc)
job.kill()
print("RESULT " + json.dumps(out), flush=True)
"""


def test_a_job_mounts_on_state_and_unmounts_on_kill(tmp_path: Path) -> None:
    """``JobTrait.remote_mount``/``gather_mount`` declare; ``state()`` mounts (on every
    host, and here); ``kill()`` unmounts before stopping the workers."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("A\n")
    mnt = tmp_path / "mnt"
    (tmp_path / "controller.py").write_text(textwrap.dedent(JOB_CONTROLLER))
    res = subprocess.run([sys.executable, str(tmp_path / "controller.py"), str(src),
                          str(mnt), str(tmp_path / "cache")], capture_output=True,
                         text=True, timeout=170)
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, res.stdout + res.stderr
    out = json.loads(line[len("RESULT "):])
    assert out["reads"] == [["A\n", "A\n"], ["A\n", "A\n"]]
    assert out["back"] == ["hosts_0", "hosts_1"] and out["back_a"] == "A\n"
    assert "no mesh named ['nope']" in out["bad_mesh"] and "['hosts']" in out["bad_mesh"]
    assert _mounted_under(mnt) == []  # also mnt-back
    assert all(_gone(pid) for pid in out["pids"])


REFRESH_CONTROLLER = """
import hashlib, json, os, sys
from regency.actor import Actor, attach_to_workers, current_rank, endpoint
from regency.remotemount import remotemount

class Look(Actor):
    @endpoint
    def look(self, mnt):
        host = "_".join(f"{k}_{v}" for k, v in dict(current_rank()).items())
        root = mnt.replace("$SUBDIR", host)
        out = {"ls": sorted(os.listdir(root)), "a": open(os.path.join(root, "a.txt")).read(),
               "big": hashlib.sha256(open(os.path.join(root, "big.bin"), "rb").read()
                                     ).hexdigest(),
               "size": os.stat(os.path.join(root, "a.txt")).st_size}
        try:
            out["old"] = open(os.path.join(root, "old.txt")).read()
        except OSError as exc:
            out["old"] = exc.strerror
        return out

src, mnt = sys.argv[3], sys.argv[4]
hosts = attach_to_workers(sys.argv[1:3])
handler = remotemount(hosts, src, mnt).open()
procs = hosts.spawn_procs()
look = procs.spawn("look", Look)
before = [v for _, v in look.look.call(mnt).get(timeout=120).items()]
with open(os.path.join(src, "a.txt"), "w") as f:
    f.write("version two, longer than the first\\n")
with open(os.path.join(src, "big.bin"), "r+b") as f:   # one block in the middle changes
    f.seek(5 << 20)
    f.write(b"x" * 4096)
os.utime(os.path.join(src, "big.bin"), ns=(1, 1))       # and its mtime, whatever the clock
os.remove(os.path.join(src, "old.txt"))
with open(os.path.join(src, "new.txt"), "w") as f:
    f.write("added\\n")
stale = [v for _, v in look.look.call(mnt).get(timeout=120).items()]
changed = handler.refresh()
after = [v for _, v in look.look.call(mnt).get(timeout=120).items()]
out = {"before": before, "stale": stale, "after": after, "changed": changed,
       "unchanged": handler.refresh(), "stats": handler.stats()}
procs.stop().get(timeout=60)
handler.close()
print("RESULT " + json.dumps(out), flush=True)
hosts.shutdown().get(timeout=30)
"""


def test_refresh_shows_changed_added_and_removed_files_on_every_host(
        workers: list[str], tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    big = bytearray(os.urandom(9 << 20))
    (src / "big.bin").write_bytes(big)
    (src / "a.txt").write_text("version one\n")
    (src / "old.txt").write_text("soon gone\n")
    (tmp_path / "controller.py").write_text(textwrap.dedent(REFRESH_CONTROLLER))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
    env["REGENCY_SECRET"] = SECRET
    res = subprocess.run([sys.executable, str(tmp_path / "controller.py"), *workers,
                          str(src), f"{tmp_path / 'mnt'}/$SUBDIR"], env=env,
                         capture_output=True, text=True, timeout=170)
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, res.stdout + res.stderr
    out = json.loads(line[len("RESULT "):])
    first = {"ls": ["a.txt", "big.bin", "old.txt"], "a": "version one\n",
             "big": hashlib.sha256(big).hexdigest(), "size": 12, "old": "soon gone\n"}
    assert out["before"] == [first, first]
    assert out["stale"] == [first, first]  # a snapshot until refresh()
    big[5 << 20:(5 << 20) + 4096] = b"x" * 4096
    now = {"ls": ["a.txt", "big.bin", "new.txt"], "a": "version two, longer than the first\n",
           "big": hashlib.sha256(big).hexdigest(), "size": 35,
           "old": "No such file or directory"}
    assert out["after"] == [now, now]
    assert out["changed"] == ["/", "/a.txt", "/big.bin", "/new.txt", "/old.txt"]
    assert out["unchanged"] == []
    # big.bin: 3 blocks, then all 3 again (its mtime changed: the whole file is re-fetched)
    assert out["stats"]["blocks"] == 3 + 1 + 1 + 3 + 1
