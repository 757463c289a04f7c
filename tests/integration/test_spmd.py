"""``regency.spmd`` on one machine: torchrun's environment and a gloo all-reduce script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from regency.actor import Actor, endpoint, this_host
from regency.spmd import run_spmd, setup_torch_elastic_env

SCRIPT = Path(__file__).resolve().parents[1] / "system" / "spmd" / "allreduce.py"


class Env(Actor):
    @endpoint
    def env(self) -> dict[str, str]:
        import os

        return {k: os.environ.get(k, "") for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                    "MASTER_ADDR", "MASTER_PORT")}


def test_setup_torch_elastic_env_is_seen_by_later_actors() -> None:
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    setup_torch_elastic_env(procs)
    seen = procs.spawn("env", Env).env.call().get(timeout=60)
    envs = [v for _, v in seen.items()]
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"}
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0", "1"]
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs}) == 1
    procs.stop().get(timeout=30)


def test_an_unmodified_torchrun_script_all_reduces(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    codes = run_spmd(procs, [str(SCRIPT), str(tmp_path)], timeout=120)
    assert [c for _, c in codes.items()] == [0, 0]
    outs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [o["sum"] for o in outs] == [3.0, 3.0]
    procs.stop().get(timeout=30)
