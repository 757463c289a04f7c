"""The examples of docs/failures.md (issue 3, item 9) and docs/data-plane.md run, and print
what their page says they print.

An example is a ``python`` code block right after a comment of the form::

    <!-- example: NAME exit=CODE stdout="text" stderr="text" ... -->

It runs as a whole program in a fresh directory; the test checks its exit status, that each
``stdout=``/``stderr=`` text appears in that stream, and that it left no process behind.
``needs=MODULE`` skips it where that module (an extra, such as torch) is not installed.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _failure_scripts import describe, kill_tagged, run_failing, top_level_tracebacks
from _scripts import wait_no_tagged

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = [DOCS / "failures.md", DOCS / "data-plane.md"]
_EXAMPLE = re.compile(r"<!--\s*example:(?P<attrs>.*?)-->\s*\n```python\n(?P<code>.*?)\n```",
                      re.S)


@dataclass
class Example:
    name: str
    code: str
    exit: int = 0
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    needs: list[str] = field(default_factory=list)  # modules it imports beyond regency's


def examples() -> list[Example]:
    found = []
    for m in _EXAMPLE.finditer("".join(page.read_text() for page in PAGES)):
        words = shlex.split(m.group("attrs"))
        ex = Example(words[0], m.group("code"))
        for word in words[1:]:
            key, _, value = word.partition("=")
            if key == "exit":
                ex.exit = int(value)
            elif key in ("stdout", "stderr"):
                getattr(ex, key).append(value)
            elif key == "needs":
                ex.needs.append(value)
            else:
                raise AssertionError(f"unknown attribute {key!r} in example {ex.name}")
        found.append(ex)
    return found


EXAMPLES = examples()


def test_the_page_has_its_examples() -> None:
    names = [e.name for e in EXAMPLES]
    assert len(names) == len(set(names)), names
    for wanted in ("actor-error", "fail-fast", "pending-call", "supervise-replace",
                   "cleanup", "user-test", "timeouts-and-deadlocks", "hung-rank-deadline",
                   "reshard"):
        assert wanted in names, names


@pytest.mark.parametrize("ex", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_example_runs_as_documented(tmp_path, ex: Example) -> None:
    for module in ex.needs:
        pytest.importorskip(module)
    run = run_failing(tmp_path, ex.code, prelude=False, name=f"{ex.name}.py", timeout=60)
    try:
        assert run.returncode == ex.exit, describe(run)
        for text in ex.stdout:
            assert text in run.stdout, f"{text!r} not in stdout\n{describe(run)}"
        for text in ex.stderr:
            assert text in run.stderr, f"{text!r} not in stderr\n{describe(run)}"
        if ex.exit == 0:
            assert not top_level_tracebacks(run.stderr), describe(run)
        assert not wait_no_tagged(run.tag), describe(run)
    finally:
        kill_tagged(run.tag)
