"""examples/dp_mlp.py: data-parallel training on a 2 x 2 mesh matches one process to 1e-5."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dp_mlp.py"


def _load():
    spec = importlib.util.spec_from_file_location("dp_mlp", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dp_mlp"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(240)
def test_mesh_loss_matches_single_process(capsys) -> None:
    example = _load()
    mesh_loss, local_loss = example.main(steps=example.STEPS)
    assert abs(mesh_loss - local_loss) <= example.TOLERANCE
    assert mesh_loss < example.single_process(0) / 10  # it did train
    out = capsys.readouterr().out
    assert "on a hosts=2 x gpus=2 mesh" in out
    assert "(within 1e-05)" in out
