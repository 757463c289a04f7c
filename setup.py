"""Build hook: ``REGENCY_COMPILE=1`` builds a wheel whose hot path is compiled by mypyc.

Everything else about the package is in ``pyproject.toml``. Without the variable (the
default, and ``pip install -e .``) regency is built as pure Python. With it, mypy must be
importable by the build (``pip wheel --no-build-isolation .``, or add it to the build
requirements); see ADR 0031 and ``regency._accel``.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import Any

from setuptools import setup


def _ext_modules() -> list[Any]:
    if os.environ.get("REGENCY_COMPILE", "") in ("", "0"):
        return []
    from mypyc.build import mypycify

    accel = runpy.run_path(str(Path("src") / "regency" / "_accel.py"))
    return mypycify([str(accel["source_path"](m, Path("src"))) for m in accel["HOT"]])


setup(ext_modules=_ext_modules())
