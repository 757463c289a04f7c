"""Job launchers (``regency.job``): local subprocesses, ssh, SLURM, Kubernetes manifests.

Controllers run as subprocess scripts (a job installs its secret before regency starts, and
each run of a script is a "re-run of the controller" that must reattach). The ssh test
starts a private ``sshd`` on a loopback port and the SLURM test a one-machine SLURM
(``munged`` + ``slurmctld`` + ``slurmd`` from Debian's ``slurm-wlm``) in a temporary folder;
each skips, saying why, where that is impossible.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from regency._job import _cache
from regency._job._local import LocalJob
from regency._job._slurm import SlurmJob
from regency._job._ssh import SSHJob
from regency.job import JobState, kubernetes_manifests, kubernetes_worker_addresses

pytestmark = pytest.mark.timeout(120)

CONTROLLER = """
import json, os, sys, time
t0 = time.monotonic()
from regency.job import {cls}
from regency.actor import Actor, endpoint

class Where(Actor):
    @endpoint
    def where(self):
        return {{"pid": os.getpid(), "ppid": os.getppid()}}

job = {cls}({args})
hosts = job.host_mesh()
procs = hosts.spawn_procs(per_host={{"gpus": 2}})
found = procs.spawn("where", Where).where.call().get(timeout=60)
out = {{"status": job.status, "workers": job.workers, "extent": dict(procs.extent),
        "procs": [v for _, v in found.items()], "took": time.monotonic() - t0,
        "labels": [h.labels for h in hosts.topology()]}}
if "kill" in sys.argv:
    job.kill()
    out["killed"] = True
print("RESULT " + json.dumps(out), flush=True)
"""


def run_controller(tmp: Path, cls: str, args: str, *, kill: bool = False,
                   env: dict[str, str] | None = None, timeout: float = 90) -> dict[str, Any]:
    """Run a controller script that starts (or reattaches to) a job; its RESULT line."""
    script = tmp / f"controller_{cls}.py"
    script.write_text(textwrap.dedent(CONTROLLER.format(cls=cls, args=args)))
    full = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
    full.update({"PYTHONUNBUFFERED": "1", "REGENCY_JOB_CACHE": str(tmp / "cache")})
    full.update(env or {})
    res = subprocess.run([sys.executable, str(script), *(["kill"] if kill else [])], cwd=tmp,
                         env=full, capture_output=True, text=True, timeout=timeout)
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"controller failed ({res.returncode}):\nstdout:\n{res.stdout}\n"
                         f"stderr:\n{res.stderr}")


def wait_for(pred: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def descends_from(pid: int, ancestor: int) -> bool:
    try:
        return any(p.pid == ancestor for p in psutil.Process(pid).parents())
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Iterator[Path]:
    """A job cache folder; whatever job it still records at the end is killed."""
    cache = tmp_path / "cache"
    cache.mkdir()
    yield tmp_path
    for state in cache.glob("*.json"):
        recorded = _cache.load(cache, state.stem)
        kind = {"local": LocalJob, "ssh": SSHJob, "slurm": SlurmJob}.get(
            str((recorded or {}).get("kind")))
        if recorded and kind is not None:
            kind._kill(recorded)


# -- LocalJob -------------------------------------------------------------------------------------
def test_local_job_launches_reattaches_and_kills(jobs_dir: Path) -> None:
    first = run_controller(jobs_dir, "LocalJob", "name='exp', hosts=2")
    assert first["status"] == "launched"
    assert first["extent"] == {"hosts": 2, "gpus": 2}
    state = json.loads((jobs_dir / "cache" / "exp.json").read_text())
    pids = [w["pid"] for w in state["workers"]]
    assert [w["addr"] for w in state["workers"]] == first["workers"]
    assert all(a.startswith("tcp:127.0.0.1:") for a in first["workers"])
    assert all(alive(p) for p in pids), "the workers outlive their controller"
    for proc in first["procs"]:  # every proc runs under one of the job's workers
        assert any(descends_from(proc["pid"], w) for w in pids) or not alive(proc["pid"])
    # the generated secret: private file, in the workers' environment, on no command line
    secret_file = jobs_dir / "cache" / "exp.secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((jobs_dir / "cache" / "exp.json").stat().st_mode) == 0o600
    secret = secret_file.read_text().strip()
    for pid in pids:
        p = psutil.Process(pid)
        assert p.environ()["REGENCY_SECRET"] == secret
        assert secret not in " ".join(p.cmdline())
    assert state["secret"] == "generated"

    again = run_controller(jobs_dir, "LocalJob", "name='exp', hosts=2")
    assert again["status"] == "reattached"
    assert again["workers"] == first["workers"]
    assert again["took"] < first["took"] + 1

    last = run_controller(jobs_dir, "LocalJob", "name='exp', hosts=2", kill=True)
    assert last["status"] == "reattached" and last["killed"]
    wait_for(lambda: not any(alive(p) for p in pids), 5, "the workers to be gone")
    assert not (jobs_dir / "cache" / "exp.json").exists()
    assert not secret_file.exists()


def test_local_job_relaunches_when_a_worker_died_or_the_spec_changed(jobs_dir: Path) -> None:
    first = run_controller(jobs_dir, "LocalJob", "name='r', hosts=2")
    old = [w["pid"] for w in json.loads((jobs_dir / "cache" / "r.json").read_text())["workers"]]
    os.kill(old[0], signal.SIGKILL)
    wait_for(lambda: not alive(old[0]), 5, "the killed worker to die")
    second = run_controller(jobs_dir, "LocalJob", "name='r', hosts=2")
    assert second["status"] == "launched" and len(first["workers"]) == 2
    # new workers: other processes (an address may come back: the kernel can hand a new
    # worker the port the killed one had)
    mid = [w["pid"] for w in json.loads((jobs_dir / "cache" / "r.json").read_text())["workers"]]
    assert set(mid).isdisjoint(old)
    wait_for(lambda: not alive(old[1]), 5, "the surviving old worker to be killed")
    third = run_controller(jobs_dir, "LocalJob", "name='r', hosts=3", kill=True)
    assert third["status"] == "launched" and third["extent"] == {"hosts": 3, "gpus": 2}
    wait_for(lambda: not any(alive(p) for p in mid), 5, "the workers of the old spec to die")


def test_local_job_takes_the_secret_from_the_environment(jobs_dir: Path) -> None:
    out = run_controller(jobs_dir, "LocalJob", "name='env', hosts=1",
                         env={"REGENCY_SECRET": "from-the-environment"})
    state = json.loads((jobs_dir / "cache" / "env.json").read_text())
    assert out["status"] == "launched" and state["secret"] == "environment"
    assert not (jobs_dir / "cache" / "env.secret").exists()
    pid = state["workers"][0]["pid"]
    assert psutil.Process(pid).environ()["REGENCY_SECRET"] == "from-the-environment"
    # a controller without the secret cannot reattach: it relaunches with a new one
    again = run_controller(jobs_dir, "LocalJob", "name='env', hosts=1", kill=True)
    assert again["status"] == "launched"
    wait_for(lambda: not alive(pid), 5, "the old worker to be killed")


def test_job_state_names_its_meshes() -> None:
    st = JobState({"hosts": "MESH"}, name="j", workers=["tcp:127.0.0.1:1"])  # type: ignore[dict-item]
    assert st.hosts == "MESH"
    with pytest.raises(AttributeError, match=r"no mesh 'trainers'.*\['hosts'\]"):
        _ = st.trainers


def test_job_names_are_checked() -> None:
    with pytest.raises(ValueError, match="job name"):
        LocalJob(name="../evil", hosts=1)
    with pytest.raises(ValueError, match="hosts"):
        LocalJob(hosts=0)


# -- Kubernetes -----------------------------------------------------------------------------------
def test_kubernetes_manifests_parse_and_name_the_workers() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse the manifests")
    text = kubernetes_manifests("trainer", 4, "registry.example/regency:1", 26600,
                                namespace="ml", resources={"limits": {"nvidia.com/gpu": 8}},
                                env={"NCCL_DEBUG": "WARN"})
    docs = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in docs] == ["Service", "StatefulSet"]  # no Secret unless asked
    svc, sts = docs
    assert svc["metadata"] == {"name": "trainer", "namespace": "ml",
                               "labels": svc["spec"]["selector"]}
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]
    assert svc["spec"]["ports"][0]["port"] == 26600
    spec = sts["spec"]
    assert spec["serviceName"] == "trainer" and spec["replicas"] == 4
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert svc["spec"]["selector"] == spec["selector"]["matchLabels"]
    (c,) = spec["template"]["spec"]["containers"]
    assert c["image"] == "registry.example/regency:1"
    assert c["command"][:4] == ["python", "-m", "regency", "worker"]
    assert "tcp://0.0.0.0:26600" in c["command"] and "$(POD_IP)" in c["command"]
    env = {e["name"]: e for e in c["env"]}
    assert env["REGENCY_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "trainer-secret",
                                                                  "key": "secret"}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["NCCL_DEBUG"]["value"] == "WARN"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert "secret" not in " ".join(c["command"]).lower()
    assert kubernetes_worker_addresses("trainer", 4, "ml") == [
        f"tcp://trainer-{i}.trainer.ml.svc:26600" for i in range(4)]
    assert kubernetes_worker_addresses("t", 1, cluster_domain="cluster.local") == [
        "tcp://t-0.t.default.svc.cluster.local:26600"]
    with_secret = list(yaml.safe_load_all(kubernetes_manifests("w", 1, "img",
                                                                secret_value="s3cr3t")))
    assert with_secret[0]["kind"] == "Secret"
    assert with_secret[0]["stringData"] == {"secret": "s3cr3t"}
    with pytest.raises(ValueError, match="DNS label"):
        kubernetes_manifests("Bad_Name", 1, "img")


# -- SLURM script and bootstrap (no SLURM needed) -------------------------------------------------
def test_slurm_script_runs_srun_of_the_worker_bootstrap(tmp_path: Path) -> None:
    job = SlurmJob(nodes=4, ntasks_per_node=2, partition="gpu", time_limit="1:00:00",
                   gpus_per_node=8, exclusive=True, slurm_args=["--constraint=a100"],
                   name="s", cache_dir=tmp_path)
    text = job.script(tmp_path / "rdv")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for want in ("--nodes=4", "--ntasks-per-node=2", "--partition=gpu", "--time=1:00:00",
                 "--gpus-per-node=8", "--exclusive", "--constraint=a100"):
        assert f"#SBATCH {want}" in lines
    srun = next(ln for ln in lines if ln.startswith("srun "))
    assert "-m regency._job._boot" in srun and f"--rendezvous {tmp_path / 'rdv'}" in srun
    assert "--port 26600" in srun
    assert "REGENCY_SECRET" not in text


def test_worker_bootstrap_writes_its_rendezvous_entry(tmp_path: Path) -> None:
    rdv = tmp_path / "rdv"
    env = {**os.environ, "REGENCY_SECRET": "boot", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
           "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "boot.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "regency._job._boot", "--port", "0",
                                 "--bind", "127.0.0.1", "--advertise", "127.0.0.1",
                                 "--rendezvous", str(rdv)], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        entry_file = rdv / "3.json"
        wait_for(entry_file.exists, 20, "the rendezvous entry")
        entry = json.loads(entry_file.read_text())
        assert entry["rank"] == 3 and entry["pid"] == proc.pid
        assert entry["addr"].startswith("tcp://127.0.0.1:")
        port = entry["addr"].rsplit(":", 1)[1]
        wait_for(lambda: f"listening on tcp:127.0.0.1:{port}" in log.read_text(), 20,
                 "the worker to listen on the announced port")
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for p in psutil.process_iter(["pid"]):  # its fork server dies with it
            if descends_from(p.pid, proc.pid):
                p.kill()


# -- SSHJob against a private sshd ----------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """A private sshd on a loopback port; yields the ssh arguments that log into it."""
    sshd_bin = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd_bin) or shutil.which("ssh") is None:
        pytest.skip("no sshd/ssh here (Debian: apt-get install openssh-server openssh-client)")
    if os.geteuid() != 0:
        pytest.skip("the test sshd logs in as root, which needs root")
    d = tmp_path_factory.mktemp("sshd")
    for key in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)],
                       check=True)
    shutil.copy(d / "user.pub", d / "authorized_keys")
    port = _free_port()
    (d / "sshd_config").write_text(textwrap.dedent(f"""\
        Port {port}
        ListenAddress 127.0.0.1
        HostKey {d / 'host'}
        AuthorizedKeysFile {d / 'authorized_keys'}
        PermitRootLogin prohibit-password
        PasswordAuthentication no
        KbdInteractiveAuthentication no
        UsePAM no
        StrictModes no
        PidFile none
        """))
    os.makedirs("/run/sshd", exist_ok=True)
    log = open(d / "sshd.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sshd_bin, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log,
                            stderr=subprocess.STDOUT)
    args = ["-p", str(port), "-i", str(d / "user"), "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["ssh", *args, "-o", "BatchMode=yes", "root@127.0.0.1", "true"],
                             capture_output=True, stdin=subprocess.DEVNULL).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"the test sshd did not start: {(d / 'sshd.log').read_text()[-500:]}")
            time.sleep(0.1)
        yield args
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True) if alive(proc.pid) else []:
            child.kill()
        proc.kill()
        proc.wait(timeout=10)
        log.close()


def test_ssh_job_starts_reattaches_and_kills(sshd: list[str], jobs_dir: Path) -> None:
    args = (f"hosts=['root@127.0.0.1', '127.0.0.1'], name='ssh1', python={sys.executable!r}, "
            f"port=0, bind='127.0.0.1', ssh_args={sshd!r}, "
            "labels=[{'rack': 'r1'}, {'rack': 'r2', 'zone': 'a b'}]")
    first = run_controller(jobs_dir, "SSHJob", args)
    assert first["status"] == "launched" and first["extent"] == {"hosts": 2, "gpus": 2}
    assert first["labels"] == [{"rack": "r1"}, {"rack": "r2", "zone": "a b"}]
    state = json.loads((jobs_dir / "cache" / "ssh1.json").read_text())
    remote = [w["pid"] for w in state["workers"]]
    assert all(alive(p) for p in remote)
    secret = (jobs_dir / "cache" / "ssh1.secret").read_text().strip()
    for w in state["workers"]:  # the secret went over stdin: on no command line
        for pid in (w["pid"], w["ssh_pid"]):
            assert secret not in " ".join(psutil.Process(pid).cmdline())
        assert psutil.Process(w["pid"]).environ()["REGENCY_SECRET"] == secret
    for proc in first["procs"]:
        assert any(descends_from(proc["pid"], w) for w in remote) or not alive(proc["pid"])
    again = run_controller(jobs_dir, "SSHJob", args, kill=True)
    assert again["status"] == "reattached" and again["workers"] == first["workers"]
    wait_for(lambda: not any(alive(p) for p in remote), 10, "the remote workers to be gone")
    assert not (jobs_dir / "cache" / "ssh1.json").exists()


# -- SlurmJob against a one-machine SLURM ---------------------------------------------------------
SLURM_CONF = """\
ClusterName=regencytest
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """munged + slurmctld + slurmd for this machine; yields the SLURM_CONF path."""
    tools = ["munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo"]
    missing = [t for t in tools if shutil.which(t) is None and not os.path.exists(f"/usr/sbin/{t}")]
    if missing:
        pytest.skip(f"SLURM is not installed ({', '.join(missing)} missing; Debian: apt-get "
                    "install slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.skip("a one-machine SLURM (slurmd) needs root")
    d = tmp_path_factory.mktemp("slurm")
    (d / "state").mkdir()
    (d / "spool").mkdir()
    host = socket.gethostname().split(".")[0]
    conf = d / "slurm.conf"
    conf.write_text(SLURM_CONF.format(host=host, d=d, ctld_port=_free_port(),
                                      d_port=_free_port(), cpus=os.cpu_count() or 1))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    subprocess.run(["mungekey", "--create", f"--keyfile={d / 'munge.key'}"], check=True,
                   capture_output=True)
    os.chmod(d / "munge.key", 0o600)
    daemons: list[subprocess.Popen[bytes]] = []
    logs = open(d / "daemons.log", "wb")  # noqa: SIM115 - closed below

    def start(argv: list[str]) -> None:
        daemons.append(subprocess.Popen(argv, env=env, stdout=logs, stderr=subprocess.STDOUT))

    try:
        start(["munged", "-F", "-f", f"--socket={d / 'munge.sock'}",
               f"--key-file={d / 'munge.key'}", f"--pid-file={d / 'munged.pid'}",
               f"--seed-file={d / 'munge.seed'}", f"--log-file={d / 'munged.log'}"])
        wait_for(lambda: (d / "munge.sock").exists() or daemons[0].poll() is not None, 10,
                 "munged")
        start(["slurmctld", "-D", "-i"])
        start(["slurmd", "-D"])

        def idle() -> bool:
            if any(p.poll() is not None for p in daemons):
                return True
            res = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                                 text=True)
            return res.stdout.strip() == "idle"

        try:
            wait_for(idle, 30, "the SLURM node to be idle")
        except AssertionError:
            pytest.skip("a one-machine SLURM did not start here: " + _tail(d / "daemons.log"))
        if any(p.poll() is not None for p in daemons):
            pytest.skip("a SLURM daemon exited at start: " + _tail(d / "daemons.log"))
        yield str(conf)
    finally:
        if all(p.poll() is None for p in daemons[1:]) and len(daemons) == 3:
            # our private cluster: cancel whatever a failed test left, before the daemons go
            subprocess.run(["scancel", "--user", str(os.getuid())], env=env, capture_output=True)
            try:
                wait_for(lambda: not subprocess.run(["squeue", "-h"], env=env, text=True,
                                                    capture_output=True).stdout.strip(),
                         15, "the test SLURM's jobs to end")
            except AssertionError:
                pass
        for p in reversed(daemons):
            if p.poll() is None:
                kids = psutil.Process(p.pid).children(recursive=True)
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
                for k in kids:
                    try:
                        k.kill()
                    except psutil.Error:
                        pass
        logs.close()


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def test_slurm_job_one_machine(slurm: str, jobs_dir: Path) -> None:
    env = {"SLURM_CONF": slurm}
    args = "nodes=1, ntasks_per_node=2, port=0, name='sl', start_timeout=60"
    first = run_controller(jobs_dir, "SlurmJob", args, env=env)
    assert first["status"] == "launched" and first["extent"] == {"hosts": 2, "gpus": 2}
    state = json.loads((jobs_dir / "cache" / "sl.json").read_text())
    job_id = state["job_id"]
    script = Path(state["script"]).read_text()
    assert "srun " in script and "REGENCY_SECRET" not in script
    secret = (jobs_dir / "cache" / "sl.secret").read_text().strip()
    assert secret not in script
    pids = [w["pid"] for w in state["workers"]]
    assert all(alive(p) for p in pids)
    assert all(psutil.Process(p).environ().get("SLURM_JOB_ID") == job_id for p in pids)
    again = run_controller(jobs_dir, "SlurmJob", args, env=env, kill=True)
    assert again["status"] == "reattached" and again["workers"] == first["workers"]
    wait_for(lambda: not any(alive(p) for p in pids), 15, "the SLURM workers to be gone")
    res = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                         text=True, env={**os.environ, "SLURM_CONF": slurm})
    assert res.stdout.strip() in ("", "COMPLETED", "COMPLETING", "CANCELLED")
