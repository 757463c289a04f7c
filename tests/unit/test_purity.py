"""The pure layers must not import I/O or concurrency machinery, even indirectly.

Each check runs in a fresh interpreter so that modules imported by pytest, by other tests or
by ``regency/__init__.py`` (which may pull in the runtime) cannot hide or fake a violation. The
child registers a stub ``regency`` package whose ``__path__`` is ``src/regency``, so importing
``regency._mesh`` runs only the subpackage's own code; it then imports every submodule too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PURE_PACKAGES = ["regency._mesh", "regency._wire", "regency._supervision"]
FORBIDDEN = ["asyncio", "socket", "threading", "subprocess", "selectors"]

CHILD = """
import importlib, pkgutil, sys, types
src, name, forbidden = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
preloaded = [m for m in forbidden if m in sys.modules]
if preloaded:
    sys.exit(f"interpreter preloaded {preloaded} before the import; cannot check purity")
stub = types.ModuleType("regency")
stub.__path__ = [src + "/regency"]
sys.modules["regency"] = stub
package = importlib.import_module(name)
for module in pkgutil.walk_packages(package.__path__, name + "."):
    importlib.import_module(module.name)
bad = [m for m in forbidden if m in sys.modules]
if bad:
    sys.exit(f"importing {name} pulled in {bad}")
"""


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_pure_package_imports_no_io(package: str) -> None:
    init = SRC.joinpath(*package.split("."), "__init__.py")
    if not init.is_file():
        pytest.skip(f"{package} does not exist yet (no {init.relative_to(SRC.parent)})")
    result = subprocess.run(
        [sys.executable, "-I", "-c", CHILD, str(SRC), package, ",".join(FORBIDDEN)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr or result.stdout
