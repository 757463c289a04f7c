"""``HostMesh.topology()`` and ``HostMesh.group_by(...)``: what each host is made of, and
host meshes shaped by it (a regency extension; G16 of the pain points).

Each host agent describes its own machine (``_runtime._topology.describe``: CPUs, NUMA
nodes, GPUs, and the labels its operator gave it); the controller asks them all at once.
``group_by`` arranges the hosts of a mesh into dimensions by the values of labels, so that
``{rack: 2, hosts: 4}`` can come from where the hosts are, not from the order they were
listed in.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._mesh import Shape
from .._runtime._aggregate import ranges
from .._runtime._runtime import Runtime
from .._runtime._topology import natural
from .._wire import _messages as m
from ._leases import ask

__all__ = ["HostInfo", "Topology", "ask_hosts", "group_order"]


@dataclass(frozen=True)
class HostInfo:
    """One host of a host mesh, as its host agent described it."""

    rank: int  # in the host mesh asked
    coords: dict[str, int]  # its point in that mesh
    address: str  # its host agent
    hostname: str
    cpus: list[int]  # the CPUs procs there may use
    numa: dict[int, list[int]]  # NUMA node -> its CPUs among those
    gpus: list[dict[str, Any]]  # {"index", "vendor", "pci", "numa"}
    labels: dict[str, str]  # given by its operator (REGENCY_HOST_LABELS, --label)

    def row(self) -> list[str]:
        numa = ";".join(f"{n}:{ranges(c)}" for n, c in self.numa.items())
        only = str(next(iter(self.numa))) if len(self.numa) == 1 else "?"  # one node: it
        gpus = ";".join(f"{g['vendor']}{g['index']}@{only if g['numa'] is None else g['numa']}"
                        for g in self.gpus) or "-"
        labels = ";".join(f"{k}={v}" for k, v in sorted(self.labels.items())) or "-"
        return [str(self.rank), self.hostname, self.address, ranges(self.cpus), numa, gpus,
                labels]


class Topology(Sequence[HostInfo]):
    """The hosts of a host mesh, by rank; ``str()`` is a table (NUMA nodes as
    ``node:cpus``, GPUs as ``vendor index@node``, items apart by ``;``)."""

    def __init__(self, hosts: list[HostInfo]) -> None:
        self._hosts = hosts

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return Topology(self._hosts[i])
        return self._hosts[i]

    def __len__(self) -> int:
        return len(self._hosts)

    def __iter__(self) -> Iterator[HostInfo]:
        return iter(self._hosts)

    def labels(self, key: str) -> list[str | None]:
        """The value of label ``key`` on each host (None where it has none)."""
        return [h.labels.get(key) for h in self._hosts]

    def __str__(self) -> str:
        head = ["host", "hostname", "agent", "cpus", "numa", "gpus", "labels"]
        rows = [head] + [h.row() for h in self._hosts]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
                         for r in rows)

    def __repr__(self) -> str:
        return f"<Topology of {len(self)} host(s)>"


def ask_hosts(rt: Runtime, agents: Sequence[str], shape: Shape, timeout: float) -> Topology:
    """Ask each host agent of ``agents`` (by rank of ``shape``) to describe its host."""
    ranks = shape.ranks()

    async def every() -> list[Any]:
        asks = [ask(rt, agents[g], lambda port, me: m.AskTopology(port), timeout)
                for g in ranks]
        return list(await asyncio.gather(*asks, return_exceptions=True))

    answers = rt.run_sync(every, timeout=timeout + 5)
    malformed = [a for a in answers if isinstance(a, ValueError)]
    if malformed:  # a host's labels
        raise ValueError(f"topology: {malformed[0]}")
    failed = [f"host {i} ({agents[g]}): " + (
        f"no answer within {timeout:g}s (frozen, or unreachable?)"
        if isinstance(a, (TimeoutError, asyncio.TimeoutError)) else f"{type(a).__name__}: {a}")
        for i, (g, a) in enumerate(zip(ranks, answers)) if isinstance(a, BaseException)]
    if failed:
        raise RuntimeError("topology: " + "; ".join(failed))
    hosts = []
    for i, (g, answer) in enumerate(zip(ranks, answers)):
        hosts.append(HostInfo(i, dict(shape.point(i)), agents[g], str(answer["hostname"]),
                              list(answer["cpus"]),
                              {int(k): list(v) for k, v in answer["numa"].items()},
                              list(answer["gpus"]), dict(answer["labels"])))
    return Topology(hosts)


def group_order(labels: Sequence[Mapping[str, str]], keys: Sequence[str]
                ) -> tuple[list[int], list[int], list[list[str]]]:
    """How to arrange hosts (their labels, by rank) into dims ``keys`` then ``hosts``:
    the sizes, the host ranks in row-major order, and each key's values in order.

    Raises:
        ValueError: a host lacks a label, or the groups are not all the same size (the
            message says which hosts and how many in each group).
    """
    if not keys:
        raise ValueError("group_by needs at least one label")
    lacking = [i for i, lab in enumerate(labels) if any(k not in lab for k in keys)]
    if lacking:
        raise ValueError(f"group_by{tuple(keys)}: host(s) {ranges(lacking)} have no "
                         f"{' or '.join(repr(k) for k in keys)} label (give each worker "
                         f"`regency worker --label KEY=VALUE`, or REGENCY_HOST_LABELS in the "
                         "environment of the process that runs its host agent)")
    values = [sorted({lab[k] for lab in labels}, key=natural) for k in keys]
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, lab in enumerate(labels):
        groups.setdefault(tuple(lab[k] for k in keys), []).append(i)
    sizes = {key: len(members) for key, members in groups.items()}
    combos = 1
    for vals in values:
        combos *= len(vals)
    if len(groups) != combos or len(set(sizes.values())) != 1:
        counts = ", ".join(f"{'/'.join(key)}: {n}" for key, n in sorted(sizes.items()))
        missing = [combo for combo in itertools.product(*values) if combo not in groups]
        gaps = f"; missing: {', '.join('/'.join(c) for c in missing)}" if missing else ""
        raise ValueError(f"group_by{tuple(keys)}: the groups must all hold the same number "
                         f"of hosts, and every combination of values must be there; hosts "
                         f"per group: {counts}{gaps}")
    index = [{v: n for n, v in enumerate(vals)} for vals in values]
    order = [i for key in sorted(groups, key=lambda k: [ix[v] for ix, v in zip(index, k)])
             for i in groups[key]]
    return [len(v) for v in values] + [next(iter(sizes.values()))], order, values
