"""``KubernetesJob`` end to end against a fake Kubernetes API server (no cluster here).

The official ``kubernetes`` client talks real HTTP to ``_fake_k8s.FakeKubernetes``, which
keeps pods, secrets, services and StatefulSets and starts each pod's container as a local
process on a loopback IP of its own. So the job's create, wait, attach, reattach and kill
flows run for real, workers included; what only a real cluster has (scheduling, images,
pod networking, RBAC) is not tested (docs/jobs.md says so).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

pytest.importorskip("kubernetes")

from _fake_k8s import FakeKubernetes, selector_matches  # noqa: E402

pytestmark = pytest.mark.timeout(240)

SECRET = "k8s-test-secret"

CONTROLLER = """
import json, os, sys
from regency.actor import Actor, endpoint
from regency.job import KubernetesJob

class Where(Actor):
    @endpoint
    def where(self):
        return os.environ.get("POD_NAME")

kubeconfig, trainer_port, judge_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
job = KubernetesJob(namespace="ml", kubeconfig=kubeconfig, timeout=90, name="kj")
job.add_mesh("trainers", 2, image_spec={"image": "regency:test", "python": sys.executable},
             port=trainer_port)
job.add_mesh("judges", 1, label_selector="app=judge", port=judge_port)
state = job.state()
out = {"status": job.status, "workers": job.workers, "where": {}}
for name in ("trainers", "judges"):
    procs = getattr(state, name).spawn_procs()
    got = procs.spawn("w", Where).where.call().get(timeout=90)
    out["where"][name] = sorted(v for _, v in got.items())
    procs.stop().get(timeout=60)
if "kill" in sys.argv:
    job.kill()
print("RESULT " + json.dumps(out), flush=True)
"""

FAILING = """
import sys
from regency.job import JobError, KubernetesJob
job = KubernetesJob(namespace="ml", kubeconfig=sys.argv[1], timeout=float(sys.argv[2]),
                    name="bad")
if sys.argv[3] == "attach":
    job.add_mesh("hosts", 2, label_selector="app=nobody", port=1)
else:
    job.add_mesh("hosts", 2, image_spec=sys.argv[3], port=1)
try:
    job.state(cached_path=None)
except JobError as exc:
    print("ERROR", exc, flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeKubernetes]:
    api = FakeKubernetes(tmp_path)
    yield api
    api.close()


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("REGENCY_SECRET", "REGENCY_BATCH", "REGENCY_JOB_STATE",
                                "KUBERNETES_SERVICE"))}
    env.update({"PYTHONUNBUFFERED": "1", "REGENCY_JOB_CACHE": str(tmp / "cache"),
                "REGENCY_SECRET": SECRET})
    return env


def _run(tmp: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp / "controller.py"
    path.write_text(textwrap.dedent(script))
    return subprocess.run([sys.executable, str(path), *args], cwd=tmp, env=_env(tmp),
                          capture_output=True, text=True, timeout=200)


def _line(res: subprocess.CompletedProcess[str], prefix: str) -> str:
    for line in res.stdout.splitlines():
        if line.startswith(prefix):
            return line[len(prefix):]
    raise AssertionError(f"no {prefix!r} line ({res.returncode}):\nstdout:\n{res.stdout}\n"
                         f"stderr:\n{res.stderr}")


def _judge_pod(port: int) -> dict[str, Any]:
    """A pod running a regency worker already, to attach to by label."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "judge-0", "labels": {"app": "judge"}},
            "spec": {"containers": [{
                "name": "worker", "image": "regency:test",
                "command": ["python", "-m", "regency", "worker", "--listen",
                            f"tcp://0.0.0.0:{port}", "--advertise", "$(POD_IP)"],
                "env": [{"name": "REGENCY_SECRET", "value": SECRET},
                        {"name": "POD_IP",
                         "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "POD_NAME",
                         "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]}}


def test_label_selectors_as_the_api_server_reads_them() -> None:
    labels = {"app": "judge", "tier": "gpu"}
    assert selector_matches("app=judge,tier==gpu", labels)
    assert selector_matches("app,!missing,tier!=cpu", labels)
    assert not selector_matches("app=judge,tier=cpu", labels)
    assert not selector_matches("missing", labels)


def test_kubernetes_job_creates_attaches_reattaches_and_kills(fake: FakeKubernetes,
                                                              tmp_path: Path) -> None:
    from kubernetes import client, config

    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    judge_port, trainer_port = _free_port(), _free_port()
    api.create_namespaced_pod("ml", _judge_pod(judge_port))
    judge_pid = fake.pod_pids()[0]

    res = _run(tmp_path, CONTROLLER, str(kubeconfig), str(trainer_port), str(judge_port))
    first = json.loads(_line(res, "RESULT "))
    assert first["status"] == "launched"
    assert first["where"] == {"trainers": ["kj-trainers-0", "kj-trainers-1"],
                              "judges": ["judge-0"]}
    assert first["workers"] == [f"tcp://127.0.0.3:{trainer_port}",
                                f"tcp://127.0.0.4:{trainer_port}",
                                f"tcp://127.0.0.2:{judge_port}"]
    # what the job made: a Secret holding the job secret, a headless Service, a StatefulSet
    kinds = sorted((k, n) for k, ns, n in fake.objects if ns == "ml")
    assert kinds == [("Pod", "judge-0"), ("Pod", "kj-trainers-0"), ("Pod", "kj-trainers-1"),
                     ("Secret", "kj-trainers-secret"), ("Service", "kj-trainers"),
                     ("StatefulSet", "kj-trainers")]
    pids = fake.pod_pids()
    assert len(pids) == 3

    res = _run(tmp_path, CONTROLLER, str(kubeconfig), str(trainer_port), str(judge_port),
               "kill")
    again = json.loads(_line(res, "RESULT "))
    assert again["status"] == "cached_running" and again["workers"] == first["workers"]
    assert again["where"] == first["where"]  # the same pods (by uid), not new ones
    # kill: what the job made is deleted (its pods' processes end); the attached pod stays
    assert sorted(n for k, ns, n in fake.objects if ns == "ml") == ["judge-0"]
    trainers = [psutil.Process(p) for p in pids if p != judge_pid and psutil.pid_exists(p)]
    _, alive = psutil.wait_procs(trainers, timeout=30)
    assert alive == []
    assert psutil.Process(judge_pid).is_running()
    api.delete_namespaced_pod("judge-0", "ml")
    assert not psutil.pid_exists(judge_pid) or \
        psutil.Process(judge_pid).status() == psutil.STATUS_ZOMBIE


def test_pods_that_never_run_and_pods_that_are_not_there_say_so(fake: FakeKubernetes,
                                                                tmp_path: Path) -> None:
    kubeconfig = str(fake.kubeconfig(tmp_path / "kubeconfig"))
    res = _run(tmp_path, FAILING, kubeconfig, "3", "never-ready")
    text = _line(res, "ERROR ")
    assert "mesh 'hosts' wants 2 running pods" in text and "namespace 'ml'" in text
    assert "after 3s 0 run (of 2 found)" in text
    res = _run(tmp_path, FAILING, kubeconfig, "2", "attach")
    assert "matching 'app=nobody'" in _line(res, "ERROR ") and "(of 0 found)" in res.stdout


def test_an_unreachable_api_server_and_a_rejected_token_say_so(fake: FakeKubernetes,
                                                               tmp_path: Path) -> None:
    closed = _free_port()  # nothing listens there
    kubeconfig = fake.kubeconfig(tmp_path / "unreachable", server=f"http://127.0.0.1:{closed}")
    res = _run(tmp_path, FAILING, str(kubeconfig), "5", "attach")
    text = _line(res, "ERROR ")
    assert f"cannot reach the Kubernetes API server at http://127.0.0.1:{closed}" in text
    assert "Check the server of your kubeconfig" in text
    token = json.loads(fake.kubeconfig(tmp_path / "badtoken").read_text())
    token["users"][0]["user"]["token"] = "wrong"
    (tmp_path / "badtoken").write_text(json.dumps(token))
    res = _run(tmp_path, FAILING, str(tmp_path / "badtoken"), "5", "attach")
    assert "cannot list the pods of mesh 'hosts'" in _line(res, "ERROR ")
    assert "401 Unauthorized" in res.stdout
