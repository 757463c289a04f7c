"""The two scripts of docs/jobs.md's "Detach and reattach" section run as written: the
first leaves its procs to the second, which finds them with their state, and again."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from _scripts import describe, kill_tagged, run_script

JOBS = Path(__file__).resolve().parents[2] / "docs" / "jobs.md"
_BLOCK = re.compile(r"```python\n(# (start|resume)\.py.*?)\n```", re.S)


def _scripts() -> dict[str, str]:
    found = {m.group(2): m.group(1) for m in _BLOCK.finditer(JOBS.read_text())}
    assert set(found) == {"start", "resume"}, "docs/jobs.md lost its start.py or resume.py"
    return found


def test_the_detach_example_of_the_docs_runs_as_written(tmp_path: Path) -> None:
    scripts = _scripts()
    env = {**os.environ, "REGENCY_SECRET": "docs-detach", "PYTHONUNBUFFERED": "1",
           "REGENCY_JOB_CACHE": str(tmp_path / "jobs")}
    runs = []
    try:
        runs.append(run_script(tmp_path, scripts["start"], env=env, timeout=120))
        assert runs[-1].returncode == 0, describe(runs[-1])
        for expected in ("2", "3"):  # resume.py detaches again: it runs twice
            runs.append(run_script(tmp_path, scripts["resume"], env=env, timeout=120))
            assert runs[-1].returncode == 0, describe(runs[-1])
            out = runs[-1].stdout
            assert "['trainers']" in out, describe(runs[-1])
            assert out.count(f"}}, {expected})") == 4, describe(runs[-1])  # each rank
    finally:
        subprocess.run([sys.executable, "-c", "from regency.job import ProcessJob; "
                        "ProcessJob({'trainers': 2}).kill()"], cwd=tmp_path, env=env,
                       timeout=60, check=False)
        for run in runs:
            kill_tagged(run.tag)
