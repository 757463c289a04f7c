"""examples/elastic_training.py: the loop goes on after a rank is killed and respawned."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import regency.actor as ra

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "elastic_training.py"


def _load():
    if str(EXAMPLE.parent) not in sys.path:
        sys.path.insert(0, str(EXAMPLE.parent))
    spec = importlib.util.spec_from_file_location("elastic_training", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["elastic_training"] = module
    spec.loader.exec_module(module)
    return module


def test_the_training_loop_survives_a_kill(capsys) -> None:
    before = ra.unhandled_fault_hook
    try:
        log = _load().main(steps=5, kill_at=3, victim=2)
    finally:
        ra.unhandled_fault_hook = before
    steps = [r for r in log if "weights" in r]
    assert [r["step"] for r in steps] == [0, 1, 2, 3, 4]
    assert all(len(r["weights"]) == 1 for r in steps), log  # every rank in step, restored
    assert steps[-1]["weights"] == [3.0]  # the failed step counted on the live ranks
    assert [r["respawned"] for r in log if "respawned" in r] == [[2]]
    assert "restored {'gpus': 2}" in capsys.readouterr().out
