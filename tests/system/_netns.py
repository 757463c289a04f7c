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
* :meth:`TestNet.impair` adds delay and loss to a host's link (``tc ... netem`` where the
  kernel has it; loss falls back to an ``nft`` rule where it does not);
* :func:`netns_problem` says why namespaces cannot be used here (not root, no ``ip``...),
  for a skip reason; :func:`cleanup_leftovers` removes what aborted runs left.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

PREFIX = "rgt"
SUBNET = "10.77.0"  # a private /24 used only inside the test namespaces
CONTROLLER_HOST_ID = 200
_NAME = re.compile(rf"^{PREFIX}-(\d+)-[0-9a-f]+-")
_problem: list[str | None] = []
_netem: list[bool] = []


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
    """Delete test namespaces left by runs whose process is gone; returns their names."""
    gone = []
    for ns in list_namespaces():
        m = _NAME.match(ns)
        if m and not _pid_alive(int(m.group(1))):
            _delete_namespace(ns)
            gone.append(ns)
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
        proc = subprocess.Popen(self.argv(which, cmd), **kwargs)
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

        Uses ``netem`` on both ends of the veth where the kernel has it. Without netem, loss
        is made with an ``nft`` rule in the node's namespace and delay cannot be made: the
        result says what was applied (``{"delay_ms": ..., "loss_pct": ..., "how": ...}``).

        Raises:
            NetnsUnavailable: neither way is available for what was asked.
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
        if delay_ms:
            why = "the kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), so no delay"
            if not loss_pct:
                raise NetnsUnavailable(why)
        if loss_pct:
            if shutil.which("nft") is None:
                raise NetnsUnavailable("neither netem nor nft is available to drop packets")
            per_way = round(loss_pct / 2 * 100)  # per 10 000 packets, each direction
            rules = (f"table inet {PREFIX}loss {{\n"
                     f"  chain i {{ type filter hook input priority 0; policy accept;\n"
                     f"    ip protocol tcp numgen random mod 10000 < {per_way} counter drop; }}\n"
                     f"  chain o {{ type filter hook output priority 0; policy accept;\n"
                     f"    ip protocol tcp numgen random mod 10000 < {per_way} counter drop; }}\n"
                     f"}}\n")
            res = self.run(node, ["nft", "-f", "-"], input=rules)
            if res.returncode != 0:
                raise NetnsUnavailable(f"nft refused the loss rule: {res.stderr.strip()}")
        node.impaired = {"delay_ms": 0.0, "loss_pct": loss_pct, "how": "nft"}
        return node.impaired

    def dropped(self, which: int | str | Node) -> int:
        """How many packets the impairment of a node's link has dropped so far."""
        node = self.node(which)
        how = node.impaired.get("how")
        if how == "nft":
            out = self.run(node, ["nft", "list", "table", "inet", f"{PREFIX}loss"]).stdout
            return sum(int(n) for n in re.findall(r"counter packets (\d+)", out))
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
            self.run(node, ["nft", "delete", "table", "inet", f"{PREFIX}loss"])
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
    """Whether :meth:`TestNet.impair` can drop packets here."""
    return netem_available() or shutil.which("nft") is not None


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
