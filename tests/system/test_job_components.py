"""A job's telemetry and admin components (``enable_telemetry``, ``enable_admin``,
``telemetry_query_client``, ``profile``), ``LocalJob.process`` and ``hosts_from_config``.

Each controller is a subprocess script: the components must be set up before the process's
first regency call, which a shared test runtime would not allow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from regency._job import _cache
from regency._job._base import JobTrait
from regency.job import job_load

pytestmark = pytest.mark.timeout(180)

TELEMETRY = """
import json, os, sys, urllib.request
from regency.job import ProcessJob, TelemetryConfig
from regency.actor import Actor, endpoint

class Echo(Actor):
    @endpoint
    def echo(self, x):
        return x

job = ProcessJob({"hosts": 2}, name="tele")
job.enable_telemetry(TelemetryConfig(retention_secs=3600, include_dashboard=True,
                                     dashboard_port=0, snapshot_interval_secs=0.2))
out = {}
state = job.state()
procs = state.hosts.spawn_procs(per_host={"gpus": 1})
echo = procs.spawn("echo", Echo)
traces = []
with job.profile(on_trace_ready=traces.append) as prof:
    for i in range(5):
        echo.echo.call(i).get(timeout=60)
out["trace_calls"] = sum(1 for e in prof.events if e.get("ph") == "X" and e["name"] == "echo")
out["trace_ready"] = len(traces)
prof.export_chrome_trace("trace.json")
client = job.telemetry_query_client()
res = client.query("SELECT count(*) AS n FROM procs")
out["procs"] = res["rows"][0]["n"]
out["columns"] = res["columns"]
try:
    client.query("SELECT * FROM no_such_table")
except RuntimeError as exc:
    out["bad_sql"] = str(exc)
out["admin_url"] = job.admin_url
req = urllib.request.Request(job.admin_url + "/api/v1/summary",
                             headers={"Authorization": "Bearer " + job.admin_token})
out["summary_keys"] = sorted(json.load(urllib.request.urlopen(req, timeout=30)))
job.dump("job.pkl")
print("RESULT " + json.dumps(out), flush=True)
sys.stdin.readline()   # the test queries the store from its own process meanwhile
procs.stop().get(timeout=60)
job.kill()
"""

ADMIN_LATE = """
import sys
from regency.actor import this_host
from regency.job import LocalJob, JobError
this_host().spawn_procs().stop().get(timeout=60)   # regency runs, not recording
job = LocalJob(hosts=("here",)).enable_admin(admin_addr="127.0.0.1:0")
try:
    job.state()
except JobError as exc:
    print("RESULT", exc, flush=True)
"""

BATCH = """
from regency.job import LocalJob
job = LocalJob(hosts=1, name="batch")
job.apply(client_script="client.py")
print("RESULT", job.process.wait(timeout=120), flush=True)
job.kill()
"""

CLIENT = """
from regency.job import LocalJob
state = LocalJob(hosts=1, name="batch").state()
print("client saw", dict(state.hosts.extent), flush=True)
raise SystemExit(7)
"""

FROM_CONFIG = """
from regency.job import hosts_from_config, set_current_job, load_current_job
set_current_job("jobs.train")
hosts = hosts_from_config("trainers")
print("RESULT", dict(hosts.extent), flush=True)
try:
    hosts_from_config("nope")
except AttributeError as exc:
    print("ERROR", exc, flush=True)
load_current_job().state().trainers  # the same workers, reattached
from regency.job import job_load
job_load(".regency/job_state.pkl").kill()
"""


def _env(tmp: Path) -> dict[str, str]:
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("REGENCY_SECRET", "REGENCY_BATCH", "REGENCY_JOB_STATE",
                                 "REGENCY_OBSERVE", "REGENCY_DASHBOARD"))}
    full.update({"PYTHONUNBUFFERED": "1", "REGENCY_JOB_CACHE": str(tmp / "cache")})
    return full


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A working directory with its own job cache; whatever is left running is killed."""
    (tmp_path / "cache").mkdir()
    yield tmp_path
    for state in (tmp_path / "cache").glob("*.json"):
        recorded = _cache.load(tmp_path / "cache", state.stem)
        kind = JobTrait._kinds.get(str((recorded or {}).get("kind")))
        if recorded and kind is not None:
            kind._kill(recorded)


def _run(tmp: Path, text: str, name: str = "controller.py") -> subprocess.CompletedProcess[str]:
    script = tmp / name
    script.write_text(textwrap.dedent(text))
    return subprocess.run([sys.executable, str(script)], cwd=tmp, env=_env(tmp),
                          capture_output=True, text=True, timeout=150)


def _result(res: subprocess.CompletedProcess[str], prefix: str = "RESULT ") -> str:
    for line in res.stdout.splitlines():
        if line.startswith(prefix):
            return line[len(prefix):]
    raise AssertionError(f"no {prefix!r} line ({res.returncode}):\nstdout:\n{res.stdout}\n"
                         f"stderr:\n{res.stderr}")


def test_telemetry_records_profiles_queries_and_serves_the_api(workdir: Path) -> None:
    script = workdir / "controller.py"
    script.write_text(textwrap.dedent(TELEMETRY))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=workdir, env=_env(workdir),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        while line and not line.startswith("RESULT "):
            line = proc.stdout.readline()
        assert line, f"the controller ended early: {proc.stderr.read() if proc.stderr else ''}"
        out: dict[str, Any] = json.loads(line[len("RESULT "):])
        assert out["trace_calls"] == 10 and out["trace_ready"] == 1  # 5 calls x 2 actors
        assert json.loads((workdir / "trace.json").read_text())["traceEvents"]
        assert out["procs"] >= 3 and out["columns"] == ["n"]  # the controller and 2+ procs
        assert "no such table: no_such_table" in out["bad_sql"]
        assert out["admin_url"].startswith("http://127.0.0.1:") and out["summary_keys"]
        # another process reads the same store through the pickled job
        job = job_load(workdir / "job.pkl")
        rows = job.telemetry_query_client().query(
            "SELECT endpoint, count(*) AS n FROM calls WHERE endpoint = 'echo' "
            "GROUP BY endpoint")["rows"]
        assert rows == [{"endpoint": "echo", "n": 10}]
        # procs sample every 0.2 s and their rows reach the store in batches: wait (bounded)
        # for the first sampled proc while the controller still runs
        deadline = time.monotonic() + 60
        while job.telemetry_query_client().query(
                "SELECT count(*) AS n FROM procs WHERE sampled_us IS NOT NULL"
        )["rows"][0]["n"] < 1:
            assert time.monotonic() < deadline, "no proc was ever sampled into the store"
            time.sleep(0.1)
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_components_enabled_after_regency_started_are_refused(workdir: Path) -> None:
    text = _result(_run(workdir, ADMIN_LATE))
    assert "before the first regency call" in text and "REGENCY_DASHBOARD=1" in text


def test_local_job_process_is_the_batch_client(workdir: Path) -> None:
    (workdir / "client.py").write_text(textwrap.dedent(CLIENT))
    res = _run(workdir, BATCH)
    assert _result(res) == "7", res.stderr
    log = next((workdir / ".regency" / "logs").glob("batch-*.log")).read_text()
    assert "client saw {'hosts': 1}" in log


def test_hosts_from_config_reads_the_current_contexts_job(workdir: Path) -> None:
    (workdir / "jobs.py").write_text("from regency.job import ProcessJob\n"
                                     "train = ProcessJob({'trainers': 2})\n")
    res = _run(workdir, FROM_CONFIG)
    assert _result(res) == "{'hosts': 2}", res.stderr
    assert "no mesh 'nope'" in _result(res, "ERROR ")
    assert res.returncode == 0, res.stderr
