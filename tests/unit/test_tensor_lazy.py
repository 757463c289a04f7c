"""``import regency`` never imports torch; the tensor engine's names load on first access."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_import_regency_does_not_import_torch() -> None:
    code = ("import sys, regency, regency.actor\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "assert 'regency._tensor.api' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_tensor_names_load_lazily() -> None:
    pytest.importorskip("torch")
    import regency

    for name in ("fetch_shard", "inspect", "remote", "reduce", "reduce_", "no_mesh", "Stream",
                 "coalescing", "to_mesh", "slice_mesh", "get_active_mesh",
                 "get_active_stream", "RemoteException", "Tensor"):
        assert getattr(regency, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        regency.nope  # noqa: B018
    with pytest.raises(ValueError, match="no device mesh is active"):
        regency.get_active_mesh()
    assert regency.get_active_stream().name == "main"
