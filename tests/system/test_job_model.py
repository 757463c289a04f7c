"""Monarch's job model (``regency.job``): ``ProcessJob``, ``state(cached_path)`` with cached
reattach and stale-state detection, ``dump``/``job_load``, ``BatchJob`` and batch clients,
``LocalJob``'s this_host form, ``KubernetesJob``'s checks, and the worker loops.

Controllers run as subprocess scripts: each run is "a re-run of the controller" that must
reattach through ``.regency/job_state.pkl`` in its working directory.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from regency._job import _cache
from regency._job._base import JobTrait
from regency.job import (
    BatchJob,
    JobError,
    LocalJob,
    ProcessJob,
    job_load,
    job_loads,
)


def still_alive(pids: list[int], extra: list[psutil.Process] = (),  # type: ignore[assignment]
                timeout: float = 30.0) -> list[psutil.Process]:
    """Wait (at most ``timeout``) for ``pids`` and ``extra`` to exit; those that did not."""
    procs = list(extra)
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return list(psutil.wait_procs(procs, timeout=timeout)[1])

pytestmark = pytest.mark.timeout(120)

CONTROLLER = """
import json, os, sys
from regency.job import ProcessJob, job_load
from regency.actor import Actor, endpoint

class Where(Actor):
    @endpoint
    def where(self):
        return os.getpid()

job = ProcessJob({meshes})
state = job.state()
out = {{"status": job.status, "apply_id": job.apply_id, "workers": job.workers, "meshes": {{}}}}
for name in {names}:
    procs = getattr(state, name).spawn_procs(per_host={{"gpus": 1}})
    out["meshes"][name] = dict(procs.extent)
    procs.spawn("w", Where).where.call().get(timeout=60)
try:
    state.nope
except AttributeError as exc:
    out["bad_name"] = str(exc)
if "kill" in sys.argv:
    job.kill()
print("RESULT " + json.dumps(out), flush=True)
"""


def controller(tmp: Path, meshes: dict[str, int], *, kill: bool = False,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a ProcessJob controller in ``tmp``; its RESULT line."""
    script = tmp / "controller.py"
    script.write_text(textwrap.dedent(CONTROLLER.format(meshes=repr(meshes),
                                                        names=repr(list(meshes)))))
    res = subprocess.run([sys.executable, str(script), *(["kill"] if kill else [])], cwd=tmp,
                         env=_env(tmp, env), capture_output=True, text=True, timeout=100)
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT "):]))
    raise AssertionError(f"controller failed ({res.returncode}):\nstdout:\n{res.stdout}\n"
                         f"stderr:\n{res.stderr}")


def _env(tmp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("REGENCY_SECRET", "REGENCY_BATCH", "REGENCY_JOB_STATE"))}
    full.update({"PYTHONUNBUFFERED": "1", "REGENCY_JOB_CACHE": str(tmp / "cache")})
    full.update(extra or {})
    return full


def worker_pids(tmp: Path) -> list[int]:
    """The worker pids the pickle in ``tmp`` records."""
    job = job_load(tmp / ".regency" / "job_state.pkl")
    return [int(w["pid"]) for w in (job._recorded or {}).get("workers", [])]


def family(pids: list[int]) -> list[psutil.Process]:
    """The processes ``pids`` and all their descendants that exist now."""
    out: list[psutil.Process] = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            out += [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return out


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


def test_process_job_reattaches_through_the_pickle_and_kill_leaves_nothing(
        workdir: Path) -> None:
    meshes = {"trainers": 2, "judges": 1}
    first = controller(workdir, meshes)
    assert first["status"] == "launched"
    assert first["meshes"] == {"trainers": {"hosts": 2, "gpus": 1},
                               "judges": {"hosts": 1, "gpus": 1}}
    assert "no mesh 'nope'" in first["bad_name"] and "['judges', 'trainers']" in first["bad_name"]
    pids = worker_pids(workdir)
    assert len(pids) == 3
    again = controller(workdir, meshes)
    assert again["status"] == "cached_running"
    assert again["workers"] == first["workers"] and again["apply_id"] == first["apply_id"]
    procs = family(pids)  # the workers, their fork servers and procs, counted before the kill
    assert len(procs) >= 3
    last = controller(workdir, meshes, kill=True)
    assert last["status"] == "cached_running"
    assert still_alive([], procs) == [], "kill left processes behind"
    assert not (workdir / ".regency" / "job_state.pkl").exists()


def test_a_stale_pickle_is_detected_and_its_survivors_killed(workdir: Path) -> None:
    assert controller(workdir, {"hosts": 2})["status"] == "launched"
    old = worker_pids(workdir)
    os.kill(old[0], signal.SIGKILL)
    assert still_alive([old[0]]) == []
    second = controller(workdir, {"hosts": 2})
    assert second["status"] == "launched"
    mid = worker_pids(workdir)
    # fresh workers: by pid, since a new worker may listen on the port a killed one freed
    assert set(mid).isdisjoint(old) and len(mid) == 2
    assert still_alive([old[1]]) == [], "the stale job's surviving worker was not killed"
    # another spec in the same directory: the running job is stale for it, and is replaced
    third = controller(workdir, {"hosts": 3}, kill=True)
    assert third["status"] == "launched" and third["meshes"]["hosts"]["hosts"] == 3
    assert still_alive(mid) == []


def test_an_unreadable_pickle_is_ignored_not_trusted(workdir: Path) -> None:
    state = workdir / ".regency" / "job_state.pkl"
    state.parent.mkdir()
    state.write_bytes(b"not a pickle")
    out = controller(workdir, {"hosts": 1}, kill=True)
    assert out["status"] == "launched"


def test_dumps_and_job_loads_round_trip_the_spec_only() -> None:
    job = ProcessJob({"a": 2}, env={"X": "1"}, name="rt")
    back = job_loads(job.dumps())
    assert isinstance(back, ProcessJob) and back.meshes == {"a": 2} and back.env == {"X": "1"}
    assert back.status == "new" and not back.active
    with pytest.raises(JobError, match="not a pickled job"):
        job_loads(b"garbage")
    with pytest.raises(JobError, match="not a pickled job but a dict"):
        job_loads(pickle.dumps({"a": 1}))


def test_process_job_checks_its_spec() -> None:
    with pytest.raises(ValueError, match="at least one mesh"):
        ProcessJob({})
    with pytest.raises(ValueError, match=r"mesh .a.*positive int"):
        ProcessJob({"a": 0})
    with pytest.raises(ValueError, match="identifier"):
        ProcessJob({"a-b": 1})


def test_batch_job_only_reattaches(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)
    job = ProcessJob({"hosts": 1}, name="batch-none", cache_dir=workdir / "cache")
    with pytest.raises(JobError, match=r"cannot reattach through .*missing\.pkl: no readable"):
        BatchJob(job).state(str(workdir / "missing.pkl"))
    assert BatchJob(job).meshes == {"hosts": 1}  # everything else is the job's


CLIENT = """
import json, os
from regency.job import ProcessJob
job = ProcessJob({"hosts": 1})
state = job.state()
n = state.hosts.spawn_procs(per_host={"gpus": 2}).extent["gpus"]
with open("client.json", "w") as f:
    json.dump({"status": job.status, "gpus": n, "batch": os.environ.get("REGENCY_BATCH_JOB")}, f)
"""

APPLY = """
import sys
from regency.job import ProcessJob
job = ProcessJob({"hosts": 1})
job.apply(client_script="client.py")
print("APPLIED", job.apply_id, flush=True)
"""


def test_apply_with_a_client_script_runs_it_against_the_same_workers(workdir: Path) -> None:
    (workdir / "client.py").write_text(textwrap.dedent(CLIENT))
    (workdir / "apply.py").write_text(textwrap.dedent(APPLY))
    res = subprocess.run([sys.executable, "apply.py"], cwd=workdir, env=_env(workdir),
                         capture_output=True, text=True, timeout=100)
    assert res.returncode == 0, res.stderr
    apply_id = res.stdout.split()[1]
    log = workdir / ".regency" / "logs" / f"{ProcessJob({'hosts': 1}).name}-{apply_id}.log"
    # the client runs detached: wait for it to exit (its pid is its session's leader)
    client = next((p for p in psutil.process_iter(["cmdline"])
                   if (p.info["cmdline"] or [])[-1:] == ["client.py"]), None)
    if client is not None:
        client.wait(timeout=90)
    out = json.loads((workdir / "client.json").read_text()) if (
        workdir / "client.json").exists() else None
    assert out is not None, f"the client wrote nothing; its log:\n{log.read_text()}"
    assert out == {"status": "cached_running", "gpus": 2, "batch": "1"}
    job = job_load(workdir / ".regency" / "batch" / f"{apply_id}.pkl")
    pids = [int(w["pid"]) for w in (job._recorded or {})["workers"]]
    procs = family(pids)
    job._cache_override = workdir / "cache"
    job.kill()
    assert still_alive([], procs) == []


def test_local_job_of_mesh_names_is_this_host() -> None:
    job = LocalJob(hosts=("trainers", "judges"))
    state = job.state(cached_path=None)
    assert sorted(state._hosts) == ["judges", "trainers"]
    assert state.trainers.extent == state.judges.extent
    assert not job.can_run(LocalJob(hosts=("trainers", "judges")))
    job.kill()


# -- KubernetesJob: what can be checked without a cluster -------------------------------------
def test_kubernetes_job_says_what_is_wrong_with_its_kubeconfig(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    pytest.importorskip("kubernetes")
    from regency.job import KubernetesJob

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    missing = KubernetesJob(kubeconfig=str(tmp_path / "nope.yaml"), cache_dir=tmp_path)
    missing.add_mesh("workers", 2, image_spec="img:1")
    with pytest.raises(JobError, match=r"kubeconfig '.*nope\.yaml' is not a file"):
        missing.apply()
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    broken = KubernetesJob(kubeconfig=str(bad), cache_dir=tmp_path)
    broken.add_mesh("workers", 2, image_spec="img:1")
    with pytest.raises(JobError, match=r"cannot load the kubeconfig .*bad\.yaml"):
        broken.apply()
    monkeypatch.delenv("REGENCY_SECRET", raising=False)
    monkeypatch.delenv("REGENCY_SECRET_FILE", raising=False)
    attach = KubernetesJob(kubeconfig=str(bad), cache_dir=tmp_path)
    attach.add_mesh("workers", 2, label_selector="app=w")
    with pytest.raises(JobError, match="must share the job secret: set REGENCY_SECRET"):
        attach.apply()
    with pytest.raises(ValueError, match="exactly one of label_selector"):
        attach.add_mesh("more", 1)
    with pytest.raises(JobError, match="no meshes"):
        KubernetesJob(kubeconfig=str(bad), cache_dir=tmp_path).apply()


# -- worker loops ---------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


WORKER = """
import sys
from regency.actor import {fn}
if "{fn}" == "start_worker_loop_forever":
    fut = start_worker_loop_forever(address=sys.argv[1])
    fut.get()
else:
    run_worker_loop_until_shutdown(address=sys.argv[1])
print("RETURNED", flush=True)
"""

ATTACH = """
import sys
from regency.actor import Actor, endpoint, attach_to_workers

class P(Actor):
    @endpoint
    def ping(self):
        return "pong"

hosts = attach_to_workers(workers=[sys.argv[1]])
print(hosts.spawn_procs().spawn("p", P).ping.call_one().get(timeout=60), flush=True)
hosts.shutdown().get(timeout=30)
"""


@pytest.mark.parametrize("fn", ["run_worker_loop_until_shutdown", "start_worker_loop_forever"])
def test_worker_loops_take_monarchs_address_forms_and_return_on_shutdown(
        tmp_path: Path, fn: str) -> None:
    port = free_port()
    env = _env(tmp_path, {"REGENCY_SECRET": "loops"})
    (tmp_path / "worker.py").write_text(textwrap.dedent(WORKER.format(fn=fn)))
    (tmp_path / "attach.py").write_text(textwrap.dedent(ATTACH))
    worker = subprocess.Popen(
        [sys.executable, "worker.py", f"tcp://127.0.0.1:{port}@tcp://0.0.0.0:{port}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        assert "listening" in line, line
        res = subprocess.run([sys.executable, "attach.py", f"service<abc>@tcp://127.0.0.1:{port}"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
        assert res.stdout.strip() == "pong", res.stderr
        rest, _ = worker.communicate(timeout=60)
        assert "RETURNED" in rest and worker.returncode == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_a_job_that_cannot_run_says_what_is_missing(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from regency.job import SlurmJob

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JobError, match=r"`sbatch` is not on PATH \(" + str(tmp_path)):
        SlurmJob(nodes=1, cache_dir=tmp_path).apply()
    monkeypatch.undo()
    if not any(os.access(os.path.join(d, "ssh"), os.X_OK)
               for d in os.environ.get("PATH", "").split(os.pathsep)):
        pytest.skip("no ssh client here to try an unreachable host")
    # in a process of its own: this one may already run regency with another job secret
    code = ("from regency.job import SSHJob\n"
            f"job = SSHJob(hosts=['regency-no-such-host.invalid'], cache_dir={str(tmp_path)!r},"
            " ssh_args=['-o', 'ConnectTimeout=5'], start_timeout=30)\n"
            "job.apply()\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=90, env=_env(tmp_path))
    assert res.returncode != 0
    assert "JobError: ssh to regency-no-such-host.invalid exited with code" in res.stderr
