"""torchrun's variables from mesh coordinates (``regency.spmd.torch_elastic_env``)."""

from __future__ import annotations

from regency.spmd import torch_elastic_env


def test_the_last_dimension_is_the_per_node_one() -> None:
    env = torch_elastic_env({"hosts": 1, "gpus": 1}, {"hosts": 2, "gpus": 2})
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == (
        "3", "4", "1", "2")
    assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"], env["ROLE_NAME"]) == ("1", "2", "rank")
    assert env["ROLE_RANK"] == "3" and env["ROLE_WORLD_SIZE"] == "4"


def test_every_rank_once() -> None:
    sizes = {"a": 2, "b": 3, "c": 2}
    ranks = sorted(int(torch_elastic_env({"a": a, "b": b, "c": c}, sizes)["RANK"])
                   for a in range(2) for b in range(3) for c in range(2))
    assert ranks == list(range(12))


def test_a_zero_dimensional_mesh_is_one_process() -> None:
    env = torch_elastic_env({}, {})
    assert env["RANK"] == "0" and env["WORLD_SIZE"] == "1" and env["LOCAL_RANK"] == "0"
