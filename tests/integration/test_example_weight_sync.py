"""examples/weight_sync.py: generators pulling through handles match the trainers each step."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "weight_sync.py"


def _load():
    # Imported by name (not run as __main__): procs, which inherit sys.path, import it too
    # and unpickle its actor classes by reference.
    if str(EXAMPLE.parent) not in sys.path:
        sys.path.insert(0, str(EXAMPLE.parent))
    spec = importlib.util.spec_from_file_location("weight_sync", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["weight_sync"] = module
    spec.loader.exec_module(module)
    return module


def test_generators_pull_published_weights(capsys) -> None:
    example = _load()
    records = example.main(trainers=2, generators=2, layers=5, mib_per_layer=2, steps=3)
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(r["in_sync"] for r in records), records
    out = capsys.readouterr().out
    assert "5 layers published by 2 trainers" in out
    assert "generator 0 pulls them over vm:" in out
