"""A private test network of Linux network namespaces, for multi-host tests on one machine.

Layout (every name starts with ``rgt-<pid>-<random>-`` so that parallel and aborted runs
never collide)::

    ns ...-br:   bridge br0 ── h0 ── veth ── eth0 in ns ...-h0   10.77.0.1/24
                            ├─ h1 ── veth ── eth0 in ns ...-h1   10.77.0.2/24
                            ├─ ...
                            └─ ctl ─ veth ── eth0 in ns ...-ctl  10.77.0.200/24

The bridge lives in a namespace of its own, so nothing is created in the root namespace
and the test subnet is reachable only from the test namespaces: traffic never leaves them.
Deleting the namespaces deletes every link with them.

* :func:`test_network` builds one and always tears it down (processes in its namespaces
  are killed first), even when the test fails;
* :meth:`TestNet.popen` / :meth:`TestNet.run` run a command inside a node's namespace;
* :meth:`TestNet.cut` / :meth:`TestNet.restore` take a host's link down and up;
* :meth:`TestNet.impair` adds delay and loss to a host's link: ``tc ... netem`` where the
  kernel has it, else a userspace relay (``_delay_relay.py``) put on the link in the bridge
  namespace, which works on any kernel;
* :func:`netns_problem` says why namespaces cannot be used here (not root, no ``ip``...),
  for a skip reason; :func:`cleanup_leftovers` removes what aborted runs left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = "rgt"
SUBNET = "10.77.0"  # a private /24 used only inside the test namespaces
CONTROLLER_HOST_ID = 200
_NAME = re.compile(rf"^{PREFIX}-(\d+)-[0-9a-f]+-")
_problem: list[str | None] = []
_netem: list[bool] = []
RELAY = Path(__file__).with_name("_delay_relay.py")
RELAY_READY_TIMEOUT = 15.0  # seconds for the relay to start (a Python start on a busy box)


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be used on this machine (the text says why)."""


def _ip(*args: str, check: bool = True, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
    return res


def netns_problem() -> str | None:
    """Why ``ip netns`` cannot be used here, or None when it can (probed once)."""
    if _problem:
        return _problem[0]
    why: str | None = None
    if shutil.which("ip") is None:
        why = "the `ip` command (iproute2) is not installed"
    elif os.geteuid() != 0:
        why = "creating network namespaces needs root"
    else:
        probe = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}-probe"
        res = _ip("netns", "add", probe, check=False)
        if res.returncode != 0:
            why = f"`ip netns add` is not permitted here: {res.stderr.strip()}"
        else:
            res = _ip("-n", probe, "link", "add", "br0", "type", "bridge", check=False)
            if res.returncode != 0:
                why = f"cannot create a bridge in a namespace: {res.stderr.strip()}"
            _ip("netns", "del", probe, check=False)
    _problem.append(why)
    return why


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_namespaces() -> list[str]:
    """Names of every named network namespace."""
    res = _ip("netns", "list", check=False)
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def _kill_pids_in(ns: str) -> None:
    """SIGKILL every process inside the namespace ``ns`` (all of them are the test's)."""
    for _ in range(20):
        res = _ip("netns", "pids", ns, check=False)
        pids = [int(p) for p in res.stdout.split() if p.isdigit()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _delete_namespace(ns: str) -> None:
    _kill_pids_in(ns)
    _ip("netns", "del", ns, check=False)


def cleanup_leftovers() -> list[str]:
    """Delete test namespaces (and relay status folders) left by runs whose process is gone;
    returns their names."""
    gone = []
    for ns in list_namespaces():
        m = _NAME.match(ns)
        if m and not _pid_alive(int(m.group(1))):
            _delete_namespace(ns)  # kills the relays running in it too
            gone.append(ns)
    for path in Path(tempfile.gettempdir()).glob(f"{PREFIX}-*-relay"):
        m = _NAME.match(path.name)
        if m and not _pid_alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            gone.append(str(path))
    return gone


@dataclass
class Node:
    """One machine of the test network: a namespace with one address."""

    name: str  # short role name: h0, h1, ..., ctl
    ns: str  # the namespace
    ip: str
    port: str  # its veth's name on the bridge side (in the bridge namespace)
    is_cut: bool = False
    impaired: dict[str, Any] = field(default_factory=dict)
    relay: subprocess.Popen[Any] | None = None  # the delay relay on its link, if any


class TestNet:
    """A bridge and its nodes; build with :func:`test_network`."""

    __test__ = False  # not a pytest test class

    def __init__(self, hosts: int, subnet: str = SUBNET) -> None:
        if not 1 <= hosts < CONTROLLER_HOST_ID:
            raise ValueError(f"hosts must be in 1..{CONTROLLER_HOST_ID - 1}")
        self.run_id = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}"
        self.bridge_ns = f"{self.run_id}-br"
        self.hosts = [Node(f"h{i}", f"{self.run_id}-h{i}", f"{subnet}.{i + 1}", f"h{i}")
                      for i in range(hosts)]
        self.controller = Node("ctl", f"{self.run_id}-ctl", f"{subnet}.{CONTROLLER_HOST_ID}",
                               "ctl")
        self.procs: list[subprocess.Popen[Any]] = []
        self._relay_dir: Path | None = None  # status files of the delay relays

    @property
    def nodes(self) -> list[Node]:
        return [*self.hosts, self.controller]

    # -- building and tearing down ---------------------------------------------------------
    def build(self) -> None:
        """Create the namespaces, the bridge and one veth per node."""
        br = self.bridge_ns
        _ip("netns", "add", br)
        _ip("-n", br, "link", "set", "lo", "up")
        _ip("-n", br, "link", "add", "br0", "type", "bridge")
        _ip("-n", br, "link", "set", "br0", "up")
        for node in self.nodes:
            _ip("netns", "add", node.ns)
            _ip("-n", node.ns, "link", "set", "lo", "up")
            _ip("-n", br, "link", "add", node.port, "type", "veth", "peer", "name", "eth0",
                "netns", node.ns)
            _ip("-n", br, "link", "set", node.port, "master", "br0")
            _ip("-n", br, "link", "set", node.port, "up")
            _ip("-n", node.ns, "addr", "add", f"{node.ip}/24", "dev", "eth0")
            _ip("-n", node.ns, "link", "set", "eth0", "up")

    def destroy(self) -> None:
        """Kill what runs in the namespaces, then delete them (and their links)."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for node in self.nodes:
            _delete_namespace(node.ns)
        _delete_namespace(self.bridge_ns)
        if self._relay_dir is not None:
            shutil.rmtree(self._relay_dir, ignore_errors=True)

    # -- running commands ------------------------------------------------------------------
    def node(self, which: int | str | Node) -> Node:
        """A node by index (hosts), role name (``"h1"``, ``"ctl"``) or itself."""
        if isinstance(which, Node):
            return which
        if isinstance(which, int):
            return self.hosts[which]
        for node in self.nodes:
            if node.name == which:
                return node
        raise KeyError(f"no node {which!r} (have {[n.name for n in self.nodes]})")

    def argv(self, which: int | str | Node, cmd: Sequence[str]) -> list[str]:
        """The command line that runs ``cmd`` inside the node's namespace."""
        return ["ip", "netns", "exec", self.node(which).ns, *cmd]

    def popen(self, which: int | str | Node, cmd: Sequence[str], **kwargs: Any
              ) -> subprocess.Popen[Any]:
        """Start ``cmd`` in the node's namespace; it is killed when the network is destroyed.

        ``ip netns exec`` execs the command, so the Popen's pid is the command's own.
        """
        return self._popen(self.argv(which, cmd), **kwargs)

    def _popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        proc = subprocess.Popen(argv, **kwargs)
        self.procs.append(proc)
        return proc

    def run(self, which: int | str | Node, cmd: Sequence[str], timeout: float = 30.0,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` to completion in the node's namespace (text output captured)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.argv(which, cmd), timeout=timeout, **kwargs)

    # -- faults ------------------------------------------------------------------------------
    def cut(self, which: int | str | Node) -> None:
        """Take the node's link down at the bridge: its packets vanish, nothing is reset."""
        node = self.node(which)
        _ip("-n", self.bridge_ns, "link", "set", node.port, "down")
        node.is_cut = True

    def restore(self, which: int | str | Node) -> None:
        """Bring a cut link back up.

        Neighbour (ARP) entries that failed while the link was down are flushed everywhere,
        as a real host would retry them: else new connections get EHOSTUNREACH for a while.
        """
        node = self.node(which)
        _ip("-n", self.bridge_ns, "link", "set", node.port, "up")
        node.is_cut = False
        for node in self.nodes:
            _ip("-n", node.ns, "neigh", "flush", "all", check=False)

    def impair(self, which: int | str | Node, delay_ms: float = 0.0, loss_pct: float = 0.0
               ) -> dict[str, Any]:
        """Delay and drop packets in both directions of a node's link.

        ``delay_ms`` is added to the round trip (half each way), ``loss_pct`` is the share of
        round trips that lose a packet (half each way). Uses ``netem`` on both ends of the veth
        where the kernel has it; else puts a userspace relay on the link (see
        :meth:`_start_relay`). Returns what was applied:
        ``{"delay_ms": ..., "loss_pct": ..., "how": "netem" | "relay"}``.

        Raises:
            NetnsUnavailable: the relay could not be started either.
        """
        node = self.node(which)
        self.clear_impairment(node)
        if netem_available():
            spec = ["netem"]
            if delay_ms:
                spec += ["delay", f"{delay_ms / 2:g}ms"]  # half each way: the RTT grows by delay
            if loss_pct:
                spec += ["loss", f"{loss_pct / 2:g}%"]
            self._tc(self.bridge_ns, node.port, spec)
            self._tc(node.ns, "eth0", spec)
            node.impaired = {"delay_ms": delay_ms, "loss_pct": loss_pct, "how": "netem"}
            return node.impaired
        self._start_relay(node, delay_ms, loss_pct)
        node.impaired = {"delay_ms": delay_ms, "loss_pct": loss_pct, "how": "relay"}
        return node.impaired

    def _relay_links(self, node: Node) -> tuple[str, str]:
        """The extra veth of a relayed link: (the end in the bridge, the relay's end)."""
        return f"{node.port}rbr", f"{node.port}rly"  # at most 15 characters: ports are short

    def _relay_status(self, node: Node) -> Path:
        if self._relay_dir is None:
            self._relay_dir = Path(tempfile.mkdtemp(prefix=f"{self.run_id}-", suffix="-relay"))
        return self._relay_dir / f"{node.name}.json"

    def _start_relay(self, node: Node, delay_ms: float, loss_pct: float) -> None:
        """Put ``_delay_relay.py`` between the node's veth and the bridge.

        In the bridge namespace, a new veth pair is made; the relay forwards frames between
        ``node.port`` and one end of it; once the relay is ready, ``node.port`` leaves br0 and
        the pair's other end joins it in its place. Established connections survive the
        switch (at most a few frames are lost or duplicated).
        """
        br = self.bridge_ns
        to_bridge, to_relay = self._relay_links(node)
        status = self._relay_status(node)
        status.unlink(missing_ok=True)
        try:
            _ip("-n", br, "link", "add", to_bridge, "type", "veth", "peer", "name", to_relay)
            for dev in (to_bridge, to_relay):
                _ip("-n", br, "link", "set", dev, "up")
            for dev in (node.port, to_relay):
                _ip("-n", br, "link", "set", dev, "promisc", "on")
            with open(status.with_suffix(".log"), "wb") as log:
                node.relay = self._popen(
                    ["ip", "netns", "exec", br, sys.executable, str(RELAY), "--a", node.port,
                     "--b", to_relay, "--delay-ms", f"{delay_ms:g}", "--loss-pct",
                     f"{loss_pct:g}", "--status", str(status)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + RELAY_READY_TIMEOUT
            while not status.exists():  # the relay creates it once its sockets are bound
                if node.relay.poll() is not None:
                    out = status.with_suffix(".log").read_text(errors="replace")
                    raise NetnsUnavailable(f"the delay relay exited ({node.relay.returncode}):"
                                           f" {out.strip()[-2000:]}")
                if time.monotonic() > deadline:
                    raise NetnsUnavailable(f"the delay relay was not ready within "
                                           f"{RELAY_READY_TIMEOUT:g}s")
                time.sleep(0.01)
            _ip("-n", br, "link", "set", node.port, "nomaster")
            _ip("-n", br, "link", "set", to_bridge, "master", "br0")
        except BaseException:
            self._stop_relay(node)
            raise

    def _stop_relay(self, node: Node) -> None:
        """Put ``node.port`` back on the bridge, stop the relay and delete its veth."""
        br = self.bridge_ns
        to_bridge, _ = self._relay_links(node)
        # first out of the bridge, so that the two paths never form a loop
        _ip("-n", br, "link", "set", to_bridge, "nomaster", check=False)
        _ip("-n", br, "link", "set", node.port, "master", "br0", check=False)
        _ip("-n", br, "link", "set", node.port, "promisc", "off", check=False)
        proc, node.relay = node.relay, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
            with contextlib.suppress(ValueError):
                self.procs.remove(proc)
        _ip("-n", br, "link", "del", to_bridge, check=False)  # its peer goes with it

    def relay_status(self, which: int | str | Node, fresh: bool = True) -> dict[str, Any]:
        """The counters of the relay on a node's link (``{}`` when it has none).

        ``fresh``: wait (up to 2 s) for a status the relay wrote after this call, so that
        every frame it handled before the call is counted.
        """
        node = self.node(which)
        if node.impaired.get("how") != "relay":
            return {}
        path = self._relay_status(node)
        since = time.time()
        deadline = time.monotonic() + 2.0
        while True:
            doc: dict[str, Any] = json.loads(path.read_text())
            if (not fresh or doc["t"] >= since or time.monotonic() > deadline
                    or node.relay is None or node.relay.poll() is not None):
                return doc
            time.sleep(0.02)

    def dropped(self, which: int | str | Node) -> int:
        """How many packets the impairment of a node's link has dropped so far.

        The relay counts frames, which may be offloaded TCP segments of several packets.
        """
        node = self.node(which)
        how = node.impaired.get("how")
        if how == "relay":
            return sum(self.relay_status(node)["dropped"].values())
        if how == "netem":
            total = 0
            for ns, dev in ((self.bridge_ns, node.port), (node.ns, "eth0")):
                out = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "qdisc", "show",
                                      "dev", dev], capture_output=True, text=True).stdout
                total += sum(int(n) for n in re.findall(r"dropped (\d+)", out))
            return total
        return 0

    def clear_impairment(self, which: int | str | Node) -> None:
        """Remove delay and loss from a node's link (no-op when there is none)."""
        node = self.node(which)
        if not node.impaired:
            return
        if node.impaired.get("how") == "netem":
            _tc_del(self.bridge_ns, node.port)
            _tc_del(node.ns, "eth0")
        else:
            self._stop_relay(node)
        node.impaired = {}

    def _tc(self, ns: str, dev: str, spec: list[str]) -> None:
        res = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev,
                              "root", *spec], capture_output=True, text=True, timeout=10)
        if res.returncode != 0:
            raise NetnsUnavailable(f"tc qdisc {' '.join(spec)} failed: {res.stderr.strip()}")


def _tc_del(ns: str, dev: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                   capture_output=True, timeout=10)


def netem_available() -> bool:
    """Whether this kernel has the netem qdisc (probed once, in a scratch namespace)."""
    if _netem:
        return _netem[0]
    ok = False
    if shutil.which("tc") is not None and netns_problem() is None:
        probe = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}-netem"
        if _ip("netns", "add", probe, check=False).returncode == 0:
            res = subprocess.run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo",
                                  "root", "netem", "delay", "1ms"], capture_output=True, timeout=10)
            ok = res.returncode == 0
            _ip("netns", "del", probe, check=False)
    _netem.append(ok)
    return ok


def loss_available() -> bool:
    """Whether :meth:`TestNet.impair` can delay and drop packets here: with netem, or with
    the userspace relay, which needs packet sockets (``AF_PACKET``) in the namespaces."""
    return netns_problem() is None and (netem_available() or hasattr(socket, "AF_PACKET"))


@contextlib.contextmanager
def test_network(hosts: int, subnet: str = SUBNET) -> Iterator[TestNet]:
    """A fresh test network with ``hosts`` host namespaces and one controller namespace.

    Removes leftovers of aborted earlier runs first, and always tears the network down.

    Raises:
        NetnsUnavailable: namespaces cannot be used here (see :func:`netns_problem`).
    """
    why = netns_problem()
    if why is not None:
        raise NetnsUnavailable(why)
    cleanup_leftovers()
    net = TestNet(hosts, subnet)
    try:
        net.build()
        yield net
    finally:
        net.destroy()


test_network.__test__ = False  # type: ignore[attr-defined]


def module_net(hosts: int) -> Iterator[TestNet]:
    """The body of a module-scoped fixture: a test network of ``hosts`` nodes, or a skip
    that says why namespaces are unavailable (``yield from module_net(2)``)."""
    import pytest

    why = netns_problem()
    if why is not None:
        pytest.skip(f"network namespaces unavailable: {why}")
    try:
        with test_network(hosts) as n:
            yield n
    except NetnsUnavailable as exc:  # pragma: no cover - probed above
        pytest.skip(str(exc))


def secret_env(secret: str, **extra: str) -> dict[str, str]:
    """This process's environment for a worker or controller of a test job: ``secret`` as
    its only ``REGENCY_SECRET*`` setting, output unbuffered, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
    env.update({"REGENCY_SECRET": secret, "PYTHONUNBUFFERED": "1"}, **extra)
    return env


def start_workers(net: TestNet, hosts: int, port: int, logs: Path, env: dict[str, str],
                  wait_s: float = 60.0) -> list[str]:
    """Start ``regency worker`` on the first ``hosts`` nodes at ``port``, logging to
    ``logs/worker<i>.log``; their addresses once each says it is listening (bounded)."""
    addrs = []
    for i in range(hosts):
        addr = f"tcp://{net.node(i).ip}:{port}"
        log = open(logs / f"worker{i}.log", "w")  # noqa: SIM115 - closed with the net
        net.popen(i, [sys.executable, "-m", "regency", "worker", "--listen", addr],
                  stdout=log, stderr=subprocess.STDOUT, env=env)
        addrs.append(addr)
    for i in range(hosts):
        path = logs / f"worker{i}.log"
        deadline = time.monotonic() + wait_s
        while "listening" not in path.read_text():
            assert time.monotonic() < deadline, path.read_text()
            time.sleep(0.05)
    return addrs
