"""Compile regency's hot path with mypyc, in place (ADR 0031), or remove the compiled files.

    .venv/bin/python tools/accelerate.py                # build (make accelerate)
    .venv/bin/python tools/accelerate.py --if-possible  # build, or say why not and exit 0
    .venv/bin/python tools/accelerate.py --clean        # back to pure Python (make pure)

The modules are ``regency._accel.HOT``. Each compiled module lands beside its ``.py`` (plus
one shared library in ``src/``), and ``src/regency/_accel_manifest.json`` records the hash of
each source, so that an edited source is never shadowed by its old compiled copy: regency
then imports the sources and warns (``regency._accel.install``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import runpy
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
# regency's own list and helpers, read without importing regency (as setup.py does)
_accel = SimpleNamespace(**runpy.run_path(str(SRC / "regency" / "_accel.py")))

MANIFEST = SRC / "regency" / _accel.MANIFEST


def compiled_files() -> list[Path]:
    """Every compiled file of the hot path, and the shared library they use."""
    files = [path for module in _accel.HOT for path in _accel.compiled_files(module, SRC)]
    return [*files, *SRC.glob("*__mypyc.*.so"), *SRC.glob("*__mypyc.*.pyd")]


def clean() -> None:
    """Remove the compiled files and the manifest: regency is pure Python again."""
    for path in compiled_files():
        path.unlink()
    MANIFEST.unlink(missing_ok=True)


def missing() -> str | None:
    """What the build needs and this machine lacks, if anything."""
    if importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed (it comes with mypy: pip install mypy)"
    compiler = sysconfig.get_config_var("CC") or "cc"
    if shutil.which(compiler.split()[0]) is None:
        return f"no C compiler ({compiler})"
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        return f"no Python headers ({include}/Python.h)"
    return None


def build() -> None:
    """Compile the hot modules in place and record their sources' hashes."""
    clean()
    sources = [str(_accel.source_path(m, SRC).relative_to(SRC)) for m in _accel.HOT]
    with tempfile.TemporaryDirectory(prefix="regency-mypyc-") as tmp:
        # mypyc builds under ./build and copies each result beside its source
        subprocess.run([sys.executable, "-m", "mypyc", "--config-file",
                        str(ROOT / "pyproject.toml"), *sources], cwd=SRC, check=True,
                       env=dict(os.environ, MYPY_CACHE_DIR=str(Path(tmp) / "mypy-cache")),
                       stdout=subprocess.DEVNULL)
    shutil.rmtree(SRC / "build", ignore_errors=True)
    hashes = _accel.source_hashes(_accel.HOT, SRC)
    MANIFEST.write_text(json.dumps({"sources": hashes}, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clean", action="store_true", help="remove the compiled files")
    parser.add_argument("--sources", action="store_true",
                        help="print the hot modules' source files (for make)")
    parser.add_argument("--if-possible", action="store_true",
                        help="when the machine cannot build, say why and exit 0")
    args = parser.parse_args(argv)
    if args.sources:
        print(" ".join(str(_accel.source_path(m, SRC).relative_to(ROOT)) for m in _accel.HOT))
        return 0
    if args.clean:
        clean()
        print("regency: the hot path is pure Python")
        return 0
    lack = missing()
    if lack is not None:
        print(f"regency: not compiling the hot path: {lack}; regency runs as pure Python")
        return 0 if args.if_possible else 1
    try:
        build()
    except subprocess.CalledProcessError as exc:
        clean()
        print(f"regency: compiling the hot path failed ({exc}); regency runs as pure Python")
        return 0 if args.if_possible else 1
    print(f"regency: compiled {len(_accel.HOT)} hot-path modules with mypyc")
    return 0


if __name__ == "__main__":
    sys.exit(main())
