"""Host topology: labels, NUMA nodes and GPUs read from a ``/sys`` tree, the shares of
``proc_bind="spread"``, and how ``group_by`` arranges hosts by their labels."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regency._api._topology import group_order
from regency._runtime._topology import (
    gpus,
    merge_labels,
    numa_nodes,
    parse_labels,
    slurm_switches,
    spread,
)


def test_labels_are_key_value_pairs() -> None:
    assert parse_labels("rack=r1, zone=a,,") == {"rack": "r1", "zone": "a"}
    assert parse_labels("") == {}
    with pytest.raises(ValueError, match=r"'rack' .* is not key=value"):
        parse_labels("rack")
    with pytest.raises(ValueError, match="is not key=value"):
        parse_labels("=r1")
    with pytest.raises(ValueError, match="'rack' is given twice"):
        parse_labels("rack=r1,rack=r2")
    for bad in ("rack=", "ra ck=r1", "rack=a;b", "9rack=r1"):
        with pytest.raises(ValueError, match="is not key=value"):
            parse_labels(bad)
    with pytest.raises(ValueError, match="'hosts' is the name of a host mesh's own"):
        parse_labels("hosts=x")
    assert parse_labels("rack=r2=x, zone = a b") == {"rack": "r2=x", "zone": "a b"}


def test_command_line_labels_win_over_the_environments() -> None:
    assert merge_labels("rack=r1,zone=a", ["rack=r2"]) == "rack=r2,zone=a"
    assert merge_labels("", []) == ""
    with pytest.raises(ValueError, match="'rack' is given twice"):
        merge_labels("", ["rack=r1", "rack=r2"])
    with pytest.raises(ValueError, match="a label holds no ','"):
        merge_labels("", ["note=a,b"])


def _sysfs(root: Path) -> Path:
    """A machine of two NUMA nodes (CPUs 0-3 and 4-7), an Intel integrated GPU, two NVIDIA
    GPUs (one per node, the second sliced into a virtual function), an AMD accelerator and
    a network card."""
    nodes = root / "devices" / "system" / "node"
    for n, cpus in ((0, "0-3"), (1, "4-7")):
        (nodes / f"node{n}").mkdir(parents=True)
        (nodes / f"node{n}" / "cpulist").write_text(cpus + "\n")
    (nodes / "online").write_text("0-1\n")
    pci = root / "bus" / "pci" / "devices"
    for name, klass, vendor, node in (("0000:00:02.0", "0x030000", "0x8086", "-1"),
                                      ("0000:17:00.0", "0x030200", "0x10de", "0"),
                                      ("0000:65:00.0", "0x020000", "0x15b3", "0"),
                                      ("0000:ca:00.0", "0x030200", "0x10de", "1"),
                                      ("0000:ca:00.4", "0x030200", "0x10de", "1"),
                                      ("0000:e1:00.0", "0x120000", "0x1002", "1")):
        (pci / name).mkdir(parents=True)
        (pci / name / "class").write_text(klass + "\n")
        (pci / name / "vendor").write_text(vendor + "\n")
        (pci / name / "numa_node").write_text(node + "\n")
    (pci / "0000:ca:00.4" / "physfn").symlink_to(pci / "0000:ca:00.0")
    return root


def test_numa_nodes_and_gpus_come_from_sys(tmp_path: Path) -> None:
    root = _sysfs(tmp_path)
    assert numa_nodes(set(range(8)), root) == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    assert numa_nodes({2, 3}, root) == {0: [2, 3]}  # a cpuset holding part of node 0
    assert numa_nodes({1, 9}, root) == {0: [1, 9]}  # CPU 9: no node names it
    assert gpus(root) == [  # numbered per vendor, in bus order; no virtual function
        {"index": 0, "vendor": "intel", "pci": "0000:00:02.0", "numa": None},
        {"index": 0, "vendor": "nvidia", "pci": "0000:17:00.0", "numa": 0},
        {"index": 1, "vendor": "nvidia", "pci": "0000:ca:00.0", "numa": 1},
        {"index": 0, "vendor": "amd", "pci": "0000:e1:00.0", "numa": 1}]


def test_a_node_without_its_cpu_list_leaves_no_cpu_out(tmp_path: Path) -> None:
    nodes = tmp_path / "devices" / "system" / "node"
    (nodes / "node0").mkdir(parents=True)
    (nodes / "node1").mkdir(parents=True)
    (nodes / "node1" / "cpulist").write_text("4-7\n")
    assert numa_nodes(set(range(8)), tmp_path) == {1: list(range(8))}


def test_a_machine_that_says_nothing_is_one_node_without_gpus(tmp_path: Path) -> None:
    assert numa_nodes({0, 1}, tmp_path) == {0: [0, 1]}
    assert gpus(tmp_path) == []


def test_spread_keeps_shares_within_nodes_when_procs_divide_them() -> None:
    nodes = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    assert [spread(i, 2, nodes) for i in range(2)] == [({0, 1, 2, 3}, 0), ({4, 5, 6, 7}, 1)]
    assert spread(1, 4, nodes) == ({2, 3}, 0)
    assert spread(1, 3, nodes)[1] is None  # CPUs 2-4 straddle the nodes
    assert spread(5, 4 * 8 // 2, nodes) == ({5}, 1)
    with pytest.raises(ValueError):
        spread(2, 2, nodes)


@st.composite
def machines(draw: st.DrawFn) -> dict[int, list[int]]:
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    nodes, cpu = {}, 0
    for n, size in enumerate(sizes):
        nodes[n] = list(range(cpu, cpu + size))
        cpu += size
    return nodes


@given(machines(), st.integers(1, 30))
def test_spread_gives_every_proc_a_fair_share(nodes: dict[int, list[int]], count: int) -> None:
    every = {c for cpus in nodes.values() for c in cpus}
    shares = [spread(i, count, nodes) for i in range(count)]
    for cpus, node in shares:
        assert cpus and cpus <= every
        if node is not None:
            assert cpus <= set(nodes[node])
    if count <= len(every):
        assert set().union(*(c for c, _ in shares)) == every
        assert sum(len(c) for c, _ in shares) == len(every)  # disjoint
        assert max(len(c) for c, _ in shares) - min(len(c) for c, _ in shares) <= 1
    else:
        assert all(len(c) == 1 for c, _ in shares)


def test_group_order_arranges_hosts_by_label_values() -> None:
    labels = [{"rack": "b"}, {"rack": "a"}, {"rack": "b"}, {"rack": "a"}]
    assert group_order(labels, ["rack"]) == ([2, 2], [1, 3, 0, 2], [["a", "b"]])
    numbered = [{"rack": "r10"}, {"rack": "r2"}]  # in natural order, not as strings
    assert group_order(numbered, ["rack"]) == ([2, 1], [1, 0], [["r2", "r10"]])
    two = [{"rack": r, "row": w} for r in "ab" for w in "xy"]
    assert group_order(two, ["row", "rack"]) == ([2, 2, 1], [0, 2, 1, 3],
                                                  [["x", "y"], ["a", "b"]])


def test_group_order_says_what_does_not_fit() -> None:
    with pytest.raises(ValueError, match=r"host\(s\) 1 have no 'rack' label"):
        group_order([{"rack": "a"}, {}], ["rack"])
    with pytest.raises(ValueError, match="a: 2, b: 1"):
        group_order([{"rack": "a"}, {"rack": "a"}, {"rack": "b"}], ["rack"])
    with pytest.raises(ValueError, match=r"every combination.*missing: a/y, b/x"):
        group_order([{"rack": "a", "row": "x"}, {"rack": "b", "row": "y"}], ["rack", "row"])
    with pytest.raises(ValueError, match="at least one label"):
        group_order([{}], [])


@given(st.lists(st.sampled_from("abc"), min_size=1, max_size=12))
def test_group_order_is_a_permutation_into_contiguous_groups(racks: list[str]) -> None:
    labels = [{"rack": r} for r in racks]
    try:
        sizes, order, values = group_order(labels, ["rack"])
    except ValueError:
        counts = {r: racks.count(r) for r in set(racks)}
        assert len(set(counts.values())) > 1
        return
    assert sorted(order) == list(range(len(racks)))
    per = sizes[-1]
    for g, value in enumerate(values[0]):
        assert {racks[i] for i in order[g * per:(g + 1) * per]} == {value}


def test_slurm_network_switches_become_labels() -> None:
    env = {"SLURM_TOPOLOGY_ADDR": "core0.leaf12.node7",
           "SLURM_TOPOLOGY_ADDR_PATTERN": "switch.switch.node"}
    assert slurm_switches(env) == {"switch": "leaf12", "switch2": "core0"}
    assert slurm_switches({"SLURM_TOPOLOGY_ADDR": "node7",
                           "SLURM_TOPOLOGY_ADDR_PATTERN": "node"}) == {}
    assert slurm_switches({}) == {}
    assert slurm_switches({"SLURM_TOPOLOGY_ADDR": "a.b",  # inconsistent: nothing
                           "SLURM_TOPOLOGY_ADDR_PATTERN": "switch.switch.node"}) == {}
