"""The documentation site, API reference included, builds with warnings as errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site"),
         "-f", str(ROOT / "mkdocs.yml")],
        cwd=ROOT, capture_output=True, text=True, timeout=170,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    page = (tmp_path / "site" / "api" / "actor" / "index.html").read_text()
    assert "returns_future" in page and "ChannelTransport" in page
