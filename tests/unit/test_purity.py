"""The pure layers must not import I/O or concurrency machinery, even indirectly.

Each check runs in a fresh interpreter so that modules imported by pytest, by other tests or
by ``regency/__init__.py`` (which may pull in the runtime) cannot hide or fake a violation. The
child registers a stub ``regency`` package whose ``__path__`` is ``src/regency``, so importing
``regency._mesh`` runs only the subpackage's own code; it then imports every submodule too.
A forbidden module that the bare interpreter already loads at start-up (found by running it
once with nothing to do) is taken out of ``sys.modules`` for the check, so an import of it by
the package still shows.
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
src, name, forbidden, baseline = (sys.argv[1], sys.argv[2], sys.argv[3].split(","),
                                  set(filter(None, sys.argv[4].split(","))))
# What the bare interpreter loads at start-up (some images preload threading) is hidden while
# the package imports, so that an import of it by the package still shows; then put back.
hidden = {m: sys.modules.pop(m) for m in forbidden if m in baseline and m in sys.modules}
stub = types.ModuleType("regency")
stub.__path__ = [src + "/regency"]
sys.modules["regency"] = stub
package = importlib.import_module(name)
for module in pkgutil.walk_packages(package.__path__, name + "."):
    importlib.import_module(module.name)
bad = [m for m in forbidden if m in sys.modules]
sys.modules.update(hidden)
if bad:
    sys.exit(f"importing {name} pulled in {bad}")
"""


def preloaded(preload: str = "") -> set[str]:
    """The forbidden modules a bare interpreter has loaded before the check's first line
    (after running ``preload``, if given)."""
    probe = f"{preload}\nimport sys; print(','.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True,
                            text=True, timeout=60, check=True)
    return set(result.stdout.strip().split(",")) & set(FORBIDDEN)


def check(package: str, src: Path = SRC, *, preload: str = "") -> subprocess.CompletedProcess[str]:
    """Run the purity check of ``package`` (found under ``src``) in a fresh interpreter.

    ``preload`` is code run before the check, standing in for an interpreter whose start-up
    imports more (a CUDA image's Python 3.12 loads ``threading``, say).
    """
    return subprocess.run(
        [sys.executable, "-I", "-c", f"{preload}\n{CHILD}", str(src), package,
         ",".join(FORBIDDEN), ",".join(sorted(preloaded(preload)))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_pure_package_imports_no_io(package: str) -> None:
    init = SRC.joinpath(*package.split("."), "__init__.py")
    if not init.is_file():
        pytest.skip(f"{package} does not exist yet (no {init.relative_to(SRC.parent)})")
    result = check(package)
    assert result.returncode == 0, result.stderr or result.stdout


@pytest.fixture
def fake_src(tmp_path: Path) -> Path:
    """A source tree with two small packages: ``regency.clean`` imports nothing forbidden,
    ``regency.dirty`` imports ``threading`` from a submodule."""
    for name, body in (("clean", "import math\n"), ("dirty", "import threading\n")):
        pkg = tmp_path / "regency" / name
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "part.py").write_text(body)
    return tmp_path


@pytest.mark.parametrize("preload", ["", "import threading"])
def test_the_check_tells_clean_from_dirty_whatever_the_interpreter_preloads(
        fake_src: Path, preload: str) -> None:
    clean = check("regency.clean", fake_src, preload=preload)
    assert clean.returncode == 0, clean.stderr or clean.stdout
    dirty = check("regency.dirty", fake_src, preload=preload)
    assert dirty.returncode != 0
    assert "pulled in ['threading']" in dirty.stderr


def test_a_preloaded_module_counts_as_preloaded() -> None:
    assert "threading" in preloaded("import threading")
