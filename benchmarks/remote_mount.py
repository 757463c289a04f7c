"""remotemount: N hosts read the same file; bytes the controller sent / file size.

    .venv/bin/python benchmarks/remote_mount.py                      # 8 hosts, 100 MB
    .venv/bin/python benchmarks/remote_mount.py --hosts 4 --mb 20 --fanout 1 16
    .venv/bin/python benchmarks/remote_mount.py --netns              # hosts in namespaces

Each host is a ``regency worker`` on loopback, or, with ``--netns`` (root), in a network
namespace of its own on a private bridge (``tests/system/_netns.py``), the controller in
another; one proc per host reads the whole file through its host's mount
(``<tmp>/mnt/$SUBDIR``). The controller's bytes are the kernel's ``bytes_acked`` of its TCP
sockets (``ss -tinp``), before and after the reads, so they count everything it sent,
messages and headers included. Goal (issue 17): close to 1.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SECRET = "remote-mount-bench"
os.environ["REGENCY_SECRET"] = SECRET


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sent_bytes(pid: int) -> int:
    """Bytes acknowledged on the TCP sockets of process ``pid`` (open ones only)."""
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True).stdout
    total, mine = 0, False
    for line in out.splitlines():
        if not line.startswith((" ", "\t")):
            mine = f"pid={pid}," in line
        elif mine:
            m = re.search(r"bytes_acked:(\d+)", line)
            total += int(m.group(1)) if m else 0
    return total


def run(addrs: list[str], src: Path, mnt: str, fanout: int, size: int) -> tuple[float, float]:
    """Mount, read on every host, unmount; (ratio sent/size, seconds of the reads)."""
    from regency.actor import Actor, attach_to_workers, current_rank, endpoint
    from regency.remotemount import remotemount

    class Reader(Actor):
        @endpoint
        def stat_size(self, mnt: str) -> int:
            return os.stat(self._path(mnt)).st_size

        @endpoint
        def read(self, mnt: str) -> int:
            with open(self._path(mnt), "rb") as f:
                return sum(len(b) for b in iter(lambda: f.read(1 << 20), b""))

        def _path(self, mnt: str) -> str:
            key = "_".join(f"{k}_{v}" for k, v in dict(current_rank()).items())
            return os.path.join(mnt.replace("$SUBDIR", key), "big.bin")

    hosts = attach_to_workers(addrs)
    handler = remotemount(hosts, str(src), mnt, fanout=fanout).open()
    try:
        readers = hosts.spawn_procs(name="readers").spawn("readers", Reader)
        readers.stat_size.call(mnt).get(timeout=600)  # warm: nothing of big.bin read yet
        before = sent_bytes(os.getpid())
        t0 = time.perf_counter()
        got = readers.read.call(mnt).get(timeout=600)
        seconds = time.perf_counter() - t0
        after = sent_bytes(os.getpid())
        assert all(v == size for _, v in got.items())
    finally:
        handler.close()
    return (after - before) / size, seconds


def controller(addrs: list[str], mb: int, fanouts: list[int]) -> None:
    """Run once per fan-out against running hosts, print the table."""
    with tempfile.TemporaryDirectory() as tmp:
        print(f"remotemount: {len(addrs)} hosts read one {mb} MB file", flush=True)
        for fanout in fanouts:
            src = Path(tmp) / f"src{fanout}"  # a fresh file: nothing cached anywhere
            src.mkdir()
            (src / "big.bin").write_bytes(os.urandom(mb << 20))
            ratio, secs = run(addrs, src, f"{tmp}/mnt{fanout}/$SUBDIR", fanout, mb << 20)
            print(f"  fanout {fanout:3d}: controller sent {ratio:5.2f} x the file, "
                  f"reads took {secs:6.2f} s", flush=True)


def main_netns(args: argparse.Namespace) -> None:
    """Hosts and controller in network namespaces: the controller runs this script again,
    in its namespace, with ``--addrs``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "system"))
    from _netns import test_network

    with test_network(args.hosts) as net, tempfile.TemporaryDirectory() as tmp:
        addrs = []
        for i in range(args.hosts):
            addr = f"tcp://{net.node(i).ip}:26650"
            log = open(Path(tmp) / f"worker{i}.log", "w")  # noqa: SIM115 - ends with the net
            net.popen(i, [sys.executable, "-m", "regency", "worker", "--listen", addr],
                      stdout=log, stderr=subprocess.STDOUT)
            addrs.append(addr)
        for i in range(args.hosts):
            deadline = time.monotonic() + 60
            while "listening" not in (Path(tmp) / f"worker{i}.log").read_text():
                if time.monotonic() > deadline:
                    raise SystemExit((Path(tmp) / f"worker{i}.log").read_text())
                time.sleep(0.05)
        print("(hosts and controller in network namespaces on one bridge)", flush=True)
        net.run("ctl", [sys.executable, __file__, "--mb", str(args.mb), "--fanout",
                        *map(str, args.fanout), "--addrs", *addrs], timeout=3600,
                capture_output=False, check=True)


def main() -> None:
    """Start the hosts, run once per fan-out, print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=8)
    p.add_argument("--mb", type=int, default=100)
    p.add_argument("--fanout", type=int, nargs="+", default=[1, 16])
    p.add_argument("--netns", action="store_true",
                   help="hosts and controller in network namespaces (needs root)")
    p.add_argument("--addrs", nargs="+", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.addrs:
        return controller(args.addrs, args.mb, args.fanout)
    if args.netns:
        return main_netns(args)
    with tempfile.TemporaryDirectory() as tmp:
        workers, addrs = [], []
        for _ in range(args.hosts):
            port = _port()
            w = subprocess.Popen([sys.executable, "-m", "regency", "worker", "--listen",
                                  f"tcp://127.0.0.1:{port}"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            assert w.stdout is not None and "listening" in w.stdout.readline()
            workers.append(w)
            addrs.append(f"tcp://127.0.0.1:{port}")
        try:
            print(f"remotemount: {args.hosts} hosts read one {args.mb} MB file")
            for fanout in args.fanout:
                src = Path(tmp) / f"src{fanout}"  # a fresh file: nothing cached anywhere
                src.mkdir()
                (src / "big.bin").write_bytes(os.urandom(args.mb << 20))
                ratio, secs = run(addrs, src, f"{tmp}/mnt{fanout}/$SUBDIR", fanout,
                                  args.mb << 20)
                print(f"  fanout {fanout:3d}: controller sent {ratio:5.2f} x the file, "
                      f"reads took {secs:6.2f} s")
        finally:
            for w in workers:
                w.kill()
                w.wait()


if __name__ == "__main__":
    main()
