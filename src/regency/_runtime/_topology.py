"""What a host is made of, as its host agent sees it: CPUs, NUMA nodes, GPUs and labels.

Read from Linux's ``/sys`` (``REGENCY_SYSFS_ROOT`` moves it: tests describe machines this
one is not) and from the labels its operator gave it (``REGENCY_HOST_LABELS="rack=r1,
zone=a"``, or ``regency worker --label rack=r1``). Also the arithmetic of
``proc_bind="spread"``: each proc of a host takes an equal share of the CPUs it may use,
NUMA node after NUMA node. Nothing here talks to other processes.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any

__all__ = ["LABELS_ENV", "allowed", "describe", "gpus", "merge_labels", "natural",
           "numa_nodes", "parse_labels", "slurm_switches", "spread"]

LABELS_ENV = "REGENCY_HOST_LABELS"
_GPU_VENDORS = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel"}
_GPU_CLASSES = ("0x0300", "0x0302", "0x0380", "0x1200")  # VGA, 3D, display, accelerator


def allowed() -> set[int]:
    """The CPUs this process may run on: its affinity, which a cpuset (cgroup v1 or v2),
    ``taskset`` or ``numactl`` around the worker has already narrowed."""
    return set(os.sched_getaffinity(0))


def natural(value: str) -> tuple[Any, ...]:
    """A sort key that orders ``r2`` before ``r10`` and ``2`` before ``10``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in re.split(r"(\d+)", value) if part)


def sys_root() -> Path:
    """Where ``/sys`` is read (``REGENCY_SYSFS_ROOT``, for tests of other machines)."""
    return Path(os.environ.get("REGENCY_SYSFS_ROOT", "/sys"))


_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def parse_labels(text: str) -> dict[str, str]:
    """``"rack=r1,zone=a"`` as a dict. A key is a name (letters, digits, ``_``, ``.``,
    ``-``; not ``hosts``, a host mesh's own dimension); a value is not empty and holds no
    ``;`` (the table's separator).

    Raises:
        ValueError: an item is not ``key=value``, or a key is given twice.
    """
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not _KEY.fullmatch(key) or not value or ";" in value:
            raise ValueError(f"host label {item!r} in {text!r} is not key=value (e.g. "
                             "rack=r1,zone=a: a key of letters, digits, _ . -; a value not "
                             "empty, without ';')")
        if key == "hosts":
            raise ValueError(f"host label {item!r}: 'hosts' is the name of a host mesh's "
                             "own dimension; call the label something else")
        if key in labels:
            raise ValueError(f"host label {key!r} is given twice in {text!r}")
        labels[key] = value
    return labels


def merge_labels(env: str, given: list[str]) -> str:
    """The labels of ``env`` (``REGENCY_HOST_LABELS``) with those of ``--label`` options,
    which win, as the text ``REGENCY_HOST_LABELS`` holds.

    Raises:
        ValueError: a label is malformed, given twice on the command line, or holds ``,``.
    """
    labels = parse_labels(env)
    bad = [label for label in given if "," in label]
    if bad:
        raise ValueError(f"--label {bad[0]!r}: a label holds no ','")
    options = parse_labels(",".join(given))
    return ",".join(f"{k}={v}" for k, v in {**labels, **options}.items())


def _int_list(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def node_cpulist(node: int, root: Path | None = None) -> list[int] | None:
    """The CPUs of NUMA node ``node`` as ``/sys`` lists them (usable or not); None where
    there is no such node (or its list is unreadable)."""
    path = (root or sys_root()) / "devices" / "system" / "node" / f"node{node}" / "cpulist"
    try:
        return _int_list(path.read_text())
    except (OSError, ValueError):
        return None


def numa_nodes(usable: set[int], root: Path | None = None) -> dict[int, list[int]]:
    """Each NUMA node's CPUs that this process may use (nodes without any left out); one
    node 0 of every usable CPU where ``/sys`` says nothing of nodes."""
    base = (root or sys_root()) / "devices" / "system" / "node"
    nodes: dict[int, list[int]] = {}
    try:
        entries = sorted(base.iterdir())
    except OSError:
        entries = []
    for entry in entries:
        name = entry.name
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        cpus = [c for c in node_cpulist(int(name[4:]), root) or [] if c in usable]
        if cpus:
            nodes[int(name[4:])] = cpus
    listed = {c for cpus in nodes.values() for c in cpus}
    unlisted = sorted(usable - listed)
    if unlisted:  # no node names them (no NUMA information): with the first node
        first = min(nodes, default=0)
        nodes[first] = sorted(set(nodes.get(first, [])) | set(unlisted))
    return dict(sorted(nodes.items()))


def gpus(root: Path | None = None) -> list[dict[str, Any]]:
    """The GPUs on the PCI bus, in bus order: ``{"index", "vendor", "pci", "numa"}``.

    ``index`` counts the GPUs of one vendor in bus order (CUDA's numbering with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``); ``numa`` is None where the platform does not say.
    Virtual functions (SR-IOV slices of one GPU) are not counted.
    """
    base = (root or sys_root()) / "bus" / "pci" / "devices"
    found: list[dict[str, Any]] = []
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    for dev in entries:
        try:
            klass = (dev / "class").read_text().strip()
            vendor = (dev / "vendor").read_text().strip()
        except OSError:
            continue
        if klass[:6] not in _GPU_CLASSES or vendor not in _GPU_VENDORS:
            continue  # a display, 3D or accelerator controller of a GPU maker
        if (dev / "physfn").exists():
            continue  # a virtual function of a GPU counted already
        try:
            node: int | None = int((dev / "numa_node").read_text().strip())
        except (OSError, ValueError):
            node = None
        name = _GPU_VENDORS[vendor]
        index = sum(1 for g in found if g["vendor"] == name)
        found.append({"index": index, "vendor": name, "pci": dev.name,
                      "numa": node if node is not None and node >= 0 else None})
    return found


def slurm_switches(env: dict[str, str]) -> dict[str, str]:
    """The switches above this node in a SLURM cluster's network tree, as labels: SLURM
    sets ``SLURM_TOPOLOGY_ADDR`` (``s0.s12.node7``) and ``SLURM_TOPOLOGY_ADDR_PATTERN``
    (``switch.switch.node``) in a job's tasks when a topology plugin is configured. The
    switch right above the node is ``switch``, the one above it ``switch2``, and so on."""
    addr = env.get("SLURM_TOPOLOGY_ADDR", "").split(".")
    pattern = env.get("SLURM_TOPOLOGY_ADDR_PATTERN", "").split(".")
    if len(addr) != len(pattern) or len(addr) < 2:
        return {}
    above = [name for name, kind in zip(addr, pattern) if kind == "switch"][::-1]
    return {("switch" if i == 0 else f"switch{i + 1}"): name for i, name in enumerate(above)}


def describe(usable: set[int]) -> dict[str, Any]:
    """This host: its name, the CPUs this process may use, NUMA nodes, GPUs and labels
    (SLURM's switches, then its operator's, which win).

    Raises:
        ValueError: ``REGENCY_HOST_LABELS`` is malformed.
    """
    labels = {**slurm_switches(dict(os.environ)),
              **parse_labels(os.environ.get(LABELS_ENV, ""))}
    return {"hostname": socket.gethostname(), "cpus": sorted(usable),
            "numa": numa_nodes(usable), "gpus": gpus(), "labels": labels}


def spread(index: int, count: int, nodes: dict[int, list[int]]) -> tuple[set[int], int | None]:
    """The CPUs of proc ``index`` of ``count`` on a host whose usable CPUs are ``nodes``
    (``numa_nodes``), and its node when its share lies in one.

    The CPUs are laid out node after node and cut into ``count`` contiguous shares of
    equal size (give or take one), so a share stays within a node when the procs divide
    the nodes evenly. With more procs than CPUs, procs share CPUs round the ring.
    """
    if count < 1:
        raise ValueError(f"spread: {count} procs")
    if not 0 <= index < count:
        raise ValueError(f"spread: proc {index} of {count}")
    ring = [(node, cpu) for node, cpus in sorted(nodes.items()) for cpu in sorted(cpus)]
    if not ring:
        raise ValueError("spread: this host has no CPU this process may use")
    if count > len(ring):
        share = [ring[index % len(ring)]]
    else:
        share = ring[index * len(ring) // count:(index + 1) * len(ring) // count]
    on = {node for node, _ in share}
    return {cpu for _, cpu in share}, (on.pop() if len(on) == 1 else None)
