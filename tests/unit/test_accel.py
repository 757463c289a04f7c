"""The compiled hot path (ADR 0031): a stale or unwanted build is never used.

``stale_reason`` is checked on a copy of the hot modules' sources with fake compiled files;
the import hook in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from regency import _accel

SRC = Path(_accel.__file__).resolve().parent.parent


def _tree(tmp_path: Path, compiled: bool, manifest: dict[str, str] | None) -> Path:
    for module in _accel.HOT:
        dst = _accel.source_path(module, tmp_path)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(_accel.source_path(module, SRC), dst)
        if compiled:
            dst.with_name(dst.stem + ".cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    if manifest is not None:
        (tmp_path / "regency" / _accel.MANIFEST).write_text(json.dumps({"sources": manifest}))
    return tmp_path


def test_no_compiled_files_nothing_to_check(tmp_path: Path) -> None:
    assert _accel.stale_reason(_tree(tmp_path, compiled=False, manifest={})) is None


def test_a_build_that_matches_its_sources_is_used(tmp_path: Path) -> None:
    root = _tree(tmp_path, compiled=True, manifest=None)
    (root / "regency" / _accel.MANIFEST).write_text(
        json.dumps({"sources": _accel.source_hashes(_accel.HOT, root)}))
    assert _accel.stale_reason(root) is None


def test_an_installed_wheel_has_no_manifest_and_is_trusted(tmp_path: Path) -> None:
    assert _accel.stale_reason(_tree(tmp_path, compiled=True, manifest=None)) is None


def test_an_edited_source_makes_the_build_stale_and_is_named(tmp_path: Path) -> None:
    root = _tree(tmp_path, compiled=True, manifest=None)
    (root / "regency" / _accel.MANIFEST).write_text(
        json.dumps({"sources": _accel.source_hashes(_accel.HOT, root)}))
    edited = _accel.source_path("regency._wire._frames", root)
    edited.write_text(edited.read_text() + "\n# an edit\n")
    reason = _accel.stale_reason(root)
    assert reason is not None and "regency._wire._frames changed since the build" in reason


def test_an_unreadable_manifest_is_stale(tmp_path: Path) -> None:
    root = _tree(tmp_path, compiled=True, manifest=None)
    (root / "regency" / _accel.MANIFEST).write_text("{not json")
    assert "unreadable" in (_accel.stale_reason(root) or "")


def test_a_stale_build_imports_the_sources_and_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_accel.PURE_ENV, raising=False)  # CI also runs this file pure
    monkeypatch.setattr(_accel, "stale_reason", lambda: "regency._wire._frames changed since "
                        "the build")
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path
                                           if not isinstance(f, _accel._SourceFirst)])
    with pytest.warns(RuntimeWarning, match="_frames changed since the build.*make accelerate"):
        _accel.install()
    spec = sys.meta_path[0].find_spec("regency._wire._frames", [str(SRC / "regency" / "_wire")])
    assert spec is not None and spec.origin == str(SRC / "regency" / "_wire" / "_frames.py")


def _compiled_in_fresh_interpreter(**env: str) -> list[str]:
    code = ("import regency, regency._accel as a; from regency.actor import this_host; "
            "print(','.join(a.compiled_modules()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**os.environ, **env}, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_pure_python_on_request() -> None:
    assert _compiled_in_fresh_interpreter(REGENCY_PURE_PYTHON="1") == []


def test_a_fresh_build_runs_compiled() -> None:
    if _accel.stale_reason() is not None or not any(
            _accel.compiled_files(m) for m in _accel.HOT):
        pytest.skip("the hot path is not compiled here (make accelerate)")
    assert _compiled_in_fresh_interpreter(REGENCY_PURE_PYTHON="") == list(_accel.HOT)
