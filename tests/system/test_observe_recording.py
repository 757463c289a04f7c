"""Recording a job: the event store (live and after the job), ``regency query`` and
``regency trace`` over it, and nothing recorded when recording is off (issue 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _scripts import TAG_VAR, kill_tagged, wait_no_tagged

HERE = Path(__file__).parent
REGENCY = [sys.executable, "-m", "regency"]


class Job:
    """The recording job of ``_observe_job.py``, stopped at READY until ``finish``."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        self.dir = tmp / "jobs"
        self.tag = uuid.uuid4().hex
        env = {**os.environ, TAG_VAR: self.tag, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "_observe_job.py"), str(self.dir), *extra], cwd=tmp,
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self.out: list[str] = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # bounded by the test's timeout
            self.out.append(line)
            if line.startswith("READY"):
                break
        else:
            raise AssertionError("the job ended early:\n" + "".join(self.out)
                                 + self.proc.stderr.read())  # type: ignore[union-attr]

    def finish(self) -> str:
        out, err = self.proc.communicate("go\n", timeout=40)
        assert self.proc.returncode == 0, out + err
        assert not wait_no_tagged(self.tag)
        return "".join(self.out) + out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        kill_tagged(self.tag)


def query(folder: Path, sql: str) -> list[dict[str, object]]:
    run = subprocess.run([*REGENCY, "query", "--dir", str(folder), "--json", sql],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    rows: list[dict[str, object]] = json.loads(run.stdout)
    return rows


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, object]]]:
    """A job run to its end; yields its folder and what was seen live."""
    tmp = tmp_path_factory.mktemp("observe")
    job = Job(tmp)
    try:
        live = {"calls": query(job.dir, "SELECT count(*) AS n FROM calls")[0]["n"]}
        job.finish()
    finally:
        job.kill()
    yield job.dir, live


def test_the_store_answers_while_the_job_runs(finished: tuple[Path, dict[str, object]]) -> None:
    _folder, live = finished
    # the job made 80 calls before READY; batches leave procs every half second, so some
    # (not necessarily all) are there while it waits
    assert isinstance(live["calls"], int)


def test_calls_are_recorded_with_caller_callee_and_bytes(
        finished: tuple[Path, dict[str, object]]) -> None:
    folder, _ = finished
    rows = query(folder, "SELECT endpoint, caller, actor, bytes, ok, end_us >= start_us AS "
                         "ordered FROM calls")
    steps = [r for r in rows if r["endpoint"] == "step"]
    assert len(steps) == 40  # 20 casts to 2 members
    assert all(r["caller"] == "root" and r["ordered"] == 1 and r["ok"] == 1 for r in steps)
    assert all(int(r["bytes"]) > 1000 for r in steps)  # type: ignore[call-overload]
    assert {str(r["actor"]).split("{")[0].rsplit("-", 1)[0] for r in rows} == {"workers",
                                                                              "helpers"}
    counts = query(folder, "SELECT endpoint, sum(n) AS n FROM call_counts GROUP BY endpoint")
    assert {r["endpoint"]: r["n"] for r in counts} == {"step": 40, "work": 40}


def test_lifecycle_failures_and_logs_are_recorded(
        finished: tuple[Path, dict[str, object]]) -> None:
    folder, _ = finished
    kinds = query(folder, "SELECT kind, count(*) AS n FROM events GROUP BY kind")
    by_kind = {r["kind"]: r["n"] for r in kinds}
    assert by_kind["spawn"] == 6 and by_kind["proc_exit"] == 2 and by_kind["proc_up"] == 3
    stops = query(folder, "SELECT actor FROM events WHERE kind='stop'")  # by procs.stop()
    assert sorted(str(r["actor"]).split("-")[0] for r in stops) == ["helpers"] * 2 + [
        "workers"] * 2
    failures = query(folder, "SELECT actor, summary, detail FROM events WHERE kind='failure'")
    assert len(failures) == 2
    detail = json.loads(str(failures[0]["detail"]))
    assert failures[0]["summary"] == "RuntimeError: broken on purpose"
    assert "broken on purpose" in detail["report"] and "RuntimeError" in detail["traceback"]
    states = query(folder, "SELECT name, state FROM actors")
    assert {(r["name"], r["state"]) for r in states} == {
        ("workers", "stopped"), ("helpers", "stopped"), ("broken", "failed")}
    procs = query(folder, "SELECT mesh_name, state, pid FROM procs")
    assert sorted(str(r["mesh_name"]) for r in procs) == ["controller", "trainers",
                                                          "trainers"]
    assert all(r["state"] == "stopped" and r["pid"] for r in procs)
    logs = query(folder, "SELECT line FROM logs WHERE line LIKE 'worker step %'")
    assert len(logs) == 40


def test_spans_and_metrics_are_recorded(finished: tuple[Path, dict[str, object]]) -> None:
    folder, _ = finished
    spans = query(folder, "SELECT name, count(*) AS n FROM spans GROUP BY name")
    assert {r["name"]: r["n"] for r in spans} == {"inner-work": 40, "helper-part": 40}
    metrics = query(folder, "SELECT sum(value) AS v, sum(count) AS c, attributes FROM metrics "
                            "WHERE name='test.calls' GROUP BY attributes")
    assert metrics == [{"v": 40.0, "c": 40, "attributes": '{"kind": "step"}'}]


def test_trace_command_writes_perfetto_json(finished: tuple[Path, dict[str, object]],
                                            tmp_path: Path) -> None:
    folder, _ = finished
    out = tmp_path / "t.json"
    run = subprocess.run([*REGENCY, "trace", "--dir", str(folder), "-o", str(out)],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert "wrote 160 calls and spans on 3 procs" in run.stdout
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert any(n.startswith("controller") for n in names)
    assert sum(1 for e in events if e["ph"] == "s") == 80  # a flow from root per call


def test_query_reports_bad_sql_and_missing_jobs(finished: tuple[Path, dict[str, object]],
                                               tmp_path: Path) -> None:
    folder, _ = finished
    bad = subprocess.run([*REGENCY, "query", "--dir", str(folder), "SELEC nothing"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "syntax error" in bad.stderr
    none = subprocess.run([*REGENCY, "query", "--dir", str(tmp_path / "empty"), "SELECT 1"],
                          capture_output=True, text=True, timeout=30)
    assert none.returncode == 2 and "observe=True" in none.stderr
    write = subprocess.run([*REGENCY, "query", "--dir", str(folder), "DELETE FROM calls"],
                           capture_output=True, text=True, timeout=30)
    assert write.returncode == 2 and "readonly" in write.stderr
