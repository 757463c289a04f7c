"""The tensor engine's device and backend rules (``regency._tensor._devices``): pure, no torch.

Which CUDA device each worker uses (its ``gpus`` coordinate, else its index on its host,
modulo the device count) and which backend a collective group gets (NCCL only when every
member has a GPU of its own), checked with made-up device counts and device identities.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from regency._mesh import Shape
from regency._tensor._devices import (
    GLOO,
    NCCL,
    choose_backend,
    device_index,
    host_ranks,
    local_rank,
    uses_nccl,
)

SRC = Path(__file__).resolve().parents[2] / "src"


def slots(shape: Shape, hosts: list[str]) -> list[int]:
    """The GPU slot of every proc of ``shape`` (``hosts[g]``: the host of global rank g)."""
    on_host = host_ranks(hosts)
    return [local_rank(shape.coordinates(g), on_host[g]) for g in shape.ranks()]


def test_the_gpus_coordinate_names_the_device() -> None:
    shape = Shape.from_sizes(["hosts", "gpus"], [2, 4])
    got = [device_index(s, 4) for s in slots(shape, ["a"] * 4 + ["b"] * 4)]
    assert got == [0, 1, 2, 3, 0, 1, 2, 3]


def test_a_gpu_dim_counts_too() -> None:
    assert local_rank({"hosts": 1, "gpu": 3}, on_host=7) == 3


def test_fewer_devices_than_procs_wrap_around() -> None:
    shape = Shape.from_sizes(["gpus"], [4])
    assert [device_index(s, 2) for s in slots(shape, ["a"] * 4)] == [0, 1, 0, 1]
    assert [device_index(s, 1) for s in slots(shape, ["a"] * 4)] == [0, 0, 0, 0]


def test_no_device_means_none() -> None:
    assert device_index(3, 0) is None


def test_without_a_gpus_dim_the_index_on_the_host_counts() -> None:
    shape = Shape.from_sizes(["procs"], [4])
    hosts = ["a", "b", "a", "b"]  # procs of two hosts, interleaved
    assert slots(shape, hosts) == [0, 0, 1, 1]
    assert [device_index(s, 8) for s in slots(shape, hosts)] == [0, 0, 1, 1]


def test_a_slice_keeps_the_slots_of_the_mesh_it_came_from() -> None:
    root = Shape.from_sizes(["hosts", "gpus"], [2, 2])
    sliced = root.select(gpus=1)  # no gpus dim left: the slots come from the root
    on_host = host_ranks(["a", "a", "b", "b"])
    assert [local_rank(root.coordinates(g), on_host[g]) for g in sliced.ranks()] == [1, 1]


def test_host_ranks_count_per_host_in_order() -> None:
    assert host_ranks(["a", "b", "a", "c", "a"]) == [0, 0, 1, 0, 2]
    assert host_ranks([]) == []


def test_distinct_devices_get_nccl() -> None:
    assert choose_backend(["gpu-0", "gpu-1"], nccl_available=True) == NCCL
    assert choose_backend(["gpu-0"], nccl_available=True) == NCCL  # a one-rank group
    assert uses_nccl(NCCL)


def test_a_shared_device_falls_back_to_gloo() -> None:
    assert choose_backend(["gpu-0", "gpu-0"], nccl_available=True) == GLOO
    assert choose_backend(["gpu-0", "gpu-1", "gpu-0"], nccl_available=True) == GLOO
    assert not uses_nccl(GLOO)


def test_a_member_without_cuda_or_no_nccl_gives_gloo() -> None:
    assert choose_backend(["gpu-0", None], nccl_available=True) == GLOO
    assert choose_backend([None, None], nccl_available=True) == GLOO
    assert choose_backend(["gpu-0", "gpu-1"], nccl_available=False) == GLOO
    assert choose_backend([], nccl_available=True) == GLOO


def test_the_rules_import_no_torch() -> None:
    code = ("import sys, regency._tensor._devices\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                   env={"PYTHONPATH": str(SRC)})
