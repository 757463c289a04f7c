"""``spawn_procs(proc_bind=...)``: pin each proc to CPUs and NUMA memory, as Monarch's does.

Monarch hands each proc's dict to ``numactl``/``taskset``; regency's procs start from a fork
server, so the forked child applies the binding before anything runs in it (a bootstrap
command included: both survive ``exec``), and the proc again, first thing, before it starts
a thread (threads inherit it): ``cpus``/``physcpubind`` (a CPU list, ``"0-3,8"``; any CPU
the job's cpuset allows) and ``cpunodebind`` (NUMA nodes: their CPUs from ``/sys``, those
of them the cpuset allows) through ``sched_setaffinity``; ``membind`` (NUMA nodes) through
the ``set_mempolicy`` system call (``MPOL_BIND``). No library is needed.

:func:`check` runs in the controller (what can be checked anywhere: keys and syntax); what
only the proc's host knows (does CPU 7 exist there?) fails in the proc, and the proc's
actors fail saying why.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._aggregate import ranges
from ._topology import allowed, node_cpulist, numa_nodes, spread

__all__ = ["KEYS", "MAX_ID", "apply", "check", "parse_list"]

KEYS = ("cpunodebind", "membind", "physcpubind", "cpus")
MAX_ID = 65535  # the largest CPU or node number taken (a typo must not fill the memory)
_NODES = Path("/sys/devices/system/node")
_MPOL_PREFERRED, _MPOL_BIND = 1, 2
_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}  # the system call's number


def parse_list(text: Any, what: str) -> set[int]:
    """``"0-3,8"`` (numactl's list syntax; an int is one item) as a set of ints.

    Raises:
        ValueError: not such a list.
    """
    out: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        lo, dash, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if dash else lo)
        except ValueError:
            raise ValueError(f"proc_bind {what}={text!r}: expected a list such as '0-3,8'"
                             ) from None
        if first < 0 or last < first:
            raise ValueError(f"proc_bind {what}={text!r}: {part!r} is not a range")
        if last > MAX_ID:
            raise ValueError(f"proc_bind {what}={text!r}: numbers above {MAX_ID} are not "
                             "CPUs or nodes")
        out.update(range(first, last + 1))
    return out


def check(binds: Any, procs_per_host: int) -> list[dict[str, str]]:
    """``spawn_procs``'s ``proc_bind``, checked where it is given: one dict per proc of a
    host, of known keys and list values; or ``"spread"``, each proc an equal share of its
    host's CPUs (worked out on the host, ``_topology.spread``).

    Raises:
        ValueError, TypeError: what is wrong, in Monarch's words where it has some.
    """
    if binds == "spread":
        return [{"spread": f"{i}/{procs_per_host}"} for i in range(procs_per_host)]
    if isinstance(binds, str):
        raise ValueError(f"proc_bind={binds!r}: give 'spread' or a list of dicts, one per "
                         "proc of a host")
    if isinstance(binds, (bytes, Mapping)) or not isinstance(binds, Sequence):
        raise TypeError(f"proc_bind must be a list of dicts, one per proc of a host, got "
                        f"{type(binds).__name__}")
    if len(binds) != procs_per_host:
        raise ValueError(f"proc_bind length ({len(binds)}) must equal procs_per_host "
                         f"({procs_per_host})")
    out = []
    for i, bind in enumerate(binds):
        if not isinstance(bind, Mapping):
            raise TypeError(f"proc_bind[{i}] must be a dict, got {type(bind).__name__}")
        unknown = sorted(set(bind) - set(KEYS))
        if unknown:
            raise ValueError(f"proc_bind[{i}] has unknown key(s) {unknown}; known: "
                             f"{', '.join(KEYS)}")
        if "cpus" in bind and "physcpubind" in bind:
            raise ValueError(f"proc_bind[{i}]: give 'cpus' or 'physcpubind', not both")
        for key, value in bind.items():
            parse_list(value, key)
        out.append({str(k): str(v) for k, v in bind.items()})
    return out


def apply(bind: Mapping[str, str] | None) -> str | None:
    """Apply this proc's binding to the calling thread (and the threads it starts later).

    Returns why it could not, in words (None when it did, or there is none)."""
    if not bind:
        return None
    if "spread" in bind:
        return _apply_spread(bind["spread"])
    try:
        cpus = _cpus_of(bind)
        if cpus is not None:
            _set_cpus(cpus)
        if "membind" in bind:
            _membind(parse_list(bind["membind"], "membind"))
    except (ValueError, OSError) as exc:
        return (f"error creating proc: proc_bind {dict(bind)} cannot be applied on this "
                f"host: {exc}")
    return None


def _apply_spread(which: str) -> str | None:
    """``proc_bind="spread"``: this proc's share of the host's CPUs (and, on a host of
    several NUMA nodes, memory from the node its share lies in)."""
    index, _, count = which.partition("/")
    try:
        nodes = numa_nodes(allowed(), Path("/sys"))
        cpus, node = spread(int(index), int(count), nodes)
        _set_cpus(cpus)
        if node is not None and len(nodes) > 1:
            _set_mempolicy(_MPOL_PREFERRED, {node})
    except (ValueError, OSError) as exc:
        return f"error creating proc: proc_bind 'spread' cannot be applied on this host: {exc}"
    return None


def _cpus_of(bind: Mapping[str, str]) -> set[int] | None:
    """The CPUs the binding asks for (None: it does not restrict CPUs). A node's CPUs are
    those of it this process may use (a job's cpuset may hold part of a node)."""
    cpus: set[int] | None = None
    for key in ("cpus", "physcpubind"):
        if key in bind:
            cpus = parse_list(bind[key], key)
    if "cpunodebind" in bind:
        usable = _usable()
        on_nodes: set[int] = set()
        for node in sorted(parse_list(bind["cpunodebind"], "cpunodebind")):
            on_nodes |= _node_cpus(node) & usable
        if not on_nodes:
            raise ValueError(f"its nodes have no CPU this process may use "
                             f"({ranges(sorted(usable))})")
        cpus = on_nodes if cpus is None else cpus & on_nodes
        if not cpus:
            raise ValueError("its CPUs and its nodes' CPUs have none in common")
    return cpus


def _set_cpus(cpus: set[int]) -> None:
    """Pin to ``cpus``, all of them or fail (the kernel would silently drop those outside
    this process's cpuset)."""
    try:
        os.sched_setaffinity(0, cpus)
        missing = sorted(cpus - os.sched_getaffinity(0))
    except OSError:
        missing = sorted(cpus - _usable())
        if not missing:
            raise
    if missing:
        raise ValueError(f"CPU(s) {ranges(missing)} are not available here (this process "
                         f"may use {ranges(sorted(_usable()))})")


def _usable() -> set[int]:
    """The CPUs this process's cgroup lets it use (its cpuset), else every online CPU."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next((line.split(":", 2)[2].strip() for line in f
                         if line.startswith("0::")), None)
        if path is not None:
            text = (Path("/sys/fs/cgroup") / path.lstrip("/") / "cpuset.cpus.effective"
                    ).read_text().strip()
            if text:
                return parse_list(text, "cpuset.cpus.effective")
    except (OSError, ValueError):
        pass
    try:
        return parse_list(Path("/sys/devices/system/cpu/online").read_text().strip(), "online")
    except (OSError, ValueError):
        return set(range(os.cpu_count() or 1))


def _node_cpus(node: int) -> set[int]:
    cpus = node_cpulist(node, _NODES.parents[2])  # /sys itself, whatever REGENCY_SYSFS_ROOT
    if cpus is None:
        raise ValueError(f"NUMA node {node} does not exist here ({_nodes_text()})")
    return set(cpus)


def _nodes_text() -> str:
    try:
        return "nodes " + (_NODES / "online").read_text().strip()
    except OSError:
        return "no NUMA information in /sys"


def _membind(nodes: set[int]) -> None:
    """``set_mempolicy(MPOL_BIND, nodes)`` for the calling thread."""
    _set_mempolicy(_MPOL_BIND, nodes)


def _set_mempolicy(mode: int, nodes: set[int]) -> None:
    """``set_mempolicy(mode, nodes)`` for the calling thread (``MPOL_BIND``: only those
    nodes; ``MPOL_PREFERRED``: that node first, others when it is full)."""
    number = _SET_MEMPOLICY.get(platform.machine())
    if number is None:
        raise ValueError(f"membind is not supported on {platform.machine()}")
    for node in nodes:
        if not (_NODES / f"node{node}").exists():
            raise ValueError(f"NUMA node {node} does not exist here ({_nodes_text()})")
    bits = 64
    words = max(nodes) // bits + 1
    mask = (ctypes.c_ulong * words)()
    for node in nodes:
        mask[node // bits] |= 1 << (node % bits)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, mode, mask, ctypes.c_ulong(words * bits + 1)) != 0:
        err = ctypes.get_errno()
        what = "MPOL_BIND" if mode == _MPOL_BIND else "MPOL_PREFERRED"
        raise OSError(err, f"set_mempolicy({what}, {ranges(sorted(nodes))}): "
                           f"{os.strerror(err)}")
