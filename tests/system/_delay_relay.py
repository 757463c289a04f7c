"""A userspace stand-in for ``tc ... netem``: an Ethernet relay that delays and drops frames.

Run inside a network namespace (as root) between two interfaces::

    python _delay_relay.py --a h0 --b h0rb --delay-ms 50 --loss-pct 5 --status /tmp/x.json

Every frame that arrives on one interface is sent out of the other one after
``delay_ms / 2`` milliseconds (so a round trip through the relay grows by ``delay_ms``),
or dropped with probability ``loss_pct / 2`` percent; each direction keeps its order.
:mod:`_netns` puts the relay on a host's link (the host's veth on one side, a new veth into
the bridge on the other) on kernels without the netem qdisc.

How frames are read and written: one ``AF_PACKET`` raw socket per interface, bound to it
for every protocol (``ETH_P_ALL``), with ``PACKET_IGNORE_OUTGOING`` (and a check of the
packet type) so that the relay never reads back what it wrote. Both sockets use
``PACKET_VNET_HDR``: each frame comes with a ``virtio_net_hdr`` describing its offloads
(a TCP segment of up to 64 KiB still to be cut into MTU-sized packets, a checksum still to
be filled in), and that header is given back with the frame when it is sent, so the kernel
finishes the job exactly as it would have without the relay. Veth links offload both by
default; without the header, large frames would be refused (``EMSGSIZE``) and partial
checksums would reach the peer unfinished. No ``ethtool`` is needed.

The relay rewrites a JSON status file (atomically) when it is ready and then at least every
0.2 s: ``{"ready": true, "forwarded": {"a>b": n, "b>a": n}, "dropped": {...}, ...}``.
It exits cleanly on SIGTERM or SIGINT (writing the file one last time).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import select
import signal
import socket
import sys
import time
from typing import Any

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_OUTGOING = 4  # the packet type the kernel gives our own writes
PACKET_VNET_HDR = 15  # socket options (linux/if_packet.h)
PACKET_IGNORE_OUTGOING = 23
BUF = 65536 + 64  # the largest (offloaded) frame plus its virtio_net_hdr
STATUS_EVERY = 0.1  # seconds between status file rewrites
BATCH = 256  # frames read from one socket before looking at the other one


def open_socket(ifname: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)  # before bind
    try:
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    except OSError:  # kernels before 4.20: the packet type check below does it
        pass
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    s.bind((ifname, ETH_P_ALL))
    s.setblocking(False)
    return s


class Relay:
    def __init__(self, a: str, b: str, delay_ms: float, loss_pct: float, status: str,
                 seed: int | None = None) -> None:
        self.names = {"a>b": f"{a}>{b}", "b>a": f"{b}>{a}"}
        self.sa = open_socket(a)
        self.sb = open_socket(b)
        self.delay = max(0.0, delay_ms) / 2000.0  # seconds, each way
        self.loss = max(0.0, loss_pct) / 200.0  # probability, each way
        self.status = status
        self.rng = random.Random(seed)
        # per direction: (due time, frame with its vnet header); the delay is constant, so
        # appending keeps both the order and the due times sorted
        self.queues: dict[str, collections.deque[tuple[float, bytes]]] = {
            "a>b": collections.deque(), "b>a": collections.deque()}
        self.out = {"a>b": self.sb, "b>a": self.sa}
        self.inp = {self.sa.fileno(): "a>b", self.sb.fileno(): "b>a"}
        self.socks = {"a>b": self.sa, "b>a": self.sb}
        self.forwarded = {"a>b": 0, "b>a": 0}
        self.dropped = {"a>b": 0, "b>a": 0}
        self.send_errors = {"a>b": 0, "b>a": 0}
        self.recv_errors = {"a>b": 0, "b>a": 0}
        self.largest = 0
        self.stopping = False

    def write_status(self, final: bool = False) -> None:
        doc: dict[str, Any] = {
            "ready": True, "pid": os.getpid(), "final": final, "links": self.names,
            "delay_ms": self.delay * 2000.0, "loss_pct": self.loss * 200.0,
            "forwarded": self.forwarded, "dropped": self.dropped,
            "send_errors": self.send_errors, "recv_errors": self.recv_errors,
            "queued": {k: len(q) for k, q in self.queues.items()},
            "largest_frame": self.largest, "t": time.time()}
        tmp = f"{self.status}.tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, self.status)

    def receive(self, way: str, now: float) -> None:
        sock, queue = self.socks[way], self.queues[way]
        due = now + self.delay
        for _ in range(BATCH):
            try:
                data, addr = sock.recvfrom(BUF)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # ENETDOWN, once, when the link was taken down (a cut): go on
                self.recv_errors[way] += 1
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            if self.loss and self.rng.random() < self.loss:
                self.dropped[way] += 1
                continue
            self.largest = max(self.largest, len(data))
            queue.append((due, data))

    def send_due(self, now: float) -> None:
        for way, queue in self.queues.items():
            out = self.out[way]
            while queue and queue[0][0] <= now:
                _, data = queue.popleft()
                try:
                    out.send(data)
                    self.forwarded[way] += 1
                except (BlockingIOError, InterruptedError):  # the device is busy: retry soon
                    queue.appendleft((now, data))
                    break
                except OSError:  # the link went down (cut) or refused the frame: lost
                    self.send_errors[way] += 1

    def run(self) -> None:
        self.write_status()
        print("relay ready", flush=True)
        next_status = time.monotonic() + STATUS_EVERY
        fds = [self.sa.fileno(), self.sb.fileno()]
        while not self.stopping:
            now = time.monotonic()
            wake = next_status
            for queue in self.queues.values():
                if queue:
                    wake = min(wake, queue[0][0])
            try:
                readable, _, _ = select.select(fds, [], [], max(0.0, wake - now))
            except InterruptedError:
                readable = []
            now = time.monotonic()
            for fd in readable:
                self.receive(self.inp[fd], now)
            self.send_due(time.monotonic())
            if now >= next_status:
                self.write_status()
                next_status = now + STATUS_EVERY
        self.write_status(final=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="one interface")
    p.add_argument("--b", required=True, help="the other interface")
    p.add_argument("--delay-ms", type=float, default=0.0, help="added to the round trip")
    p.add_argument("--loss-pct", type=float, default=0.0, help="of round trips (half each way)")
    p.add_argument("--status", required=True, help="JSON status file, rewritten atomically")
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args(argv)
    relay = Relay(args.a, args.b, args.delay_ms, args.loss_pct, args.status, args.seed)

    def stop(signum: int, frame: Any) -> None:
        relay.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    relay.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
