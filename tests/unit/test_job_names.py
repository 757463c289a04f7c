"""Monarch's job helper names that need no workers: service proc ids, SlurmJob's spec
(Monarch's signature and regency's), the telemetry/admin configs, and JobTrait's default name."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from regency._api._worker_addr import parse_worker_address
from regency.job import (
    SERVICE_PROC_IDS_ENV,
    SERVICE_PROC_RANK_ENV,
    JobError,
    JobTrait,
    LocalJob,
    MeshAdminConfig,
    ProcessJob,
    SlurmJob,
    TelemetryConfig,
    deserialize_service_proc_ids,
    new_service_proc_id,
    ranked_service_proc_id_from_env,
    serialize_service_proc_ids,
    service_proc_addr,
    service_proc_addrs,
)


def test_service_proc_ids_round_trip_and_label_addresses(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    ids = [new_service_proc_id() for _ in range(3)]
    assert len(set(ids)) == 3 and all(i.startswith("service<") for i in ids)
    text = serialize_service_proc_ids(ids)
    assert deserialize_service_proc_ids(text) == ids
    addr = service_proc_addr("tcp://node1:26600", ids[0])
    assert addr == f"{ids[0]}@tcp://node1:26600"
    # regency's worker-address parser accepts the labelled form and drops the id
    assert parse_worker_address(addr) == parse_worker_address("tcp://node1:26600")
    assert service_proc_addrs(["tcp://a:1", "tcp://b:1"], None) == ["tcp://a:1", "tcp://b:1"]
    with pytest.raises(ValueError, match="2 worker addresses but 1 service proc ids"):
        service_proc_addrs(["tcp://a:1", "tcp://b:1"], ids[:1])
    with pytest.raises(ValueError, match="not a service proc id"):
        serialize_service_proc_ids(["nope"])
    monkeypatch.delenv(SERVICE_PROC_IDS_ENV, raising=False)
    assert ranked_service_proc_id_from_env() is None
    monkeypatch.setenv(SERVICE_PROC_IDS_ENV, text)
    monkeypatch.setenv(SERVICE_PROC_RANK_ENV, "2")
    assert ranked_service_proc_id_from_env() == ids[2]
    monkeypatch.setenv("MY_RANK", "1")
    assert ranked_service_proc_id_from_env(rank_env="MY_RANK") == ids[1]
    monkeypatch.setenv(SERVICE_PROC_RANK_ENV, "3")
    with pytest.raises(ValueError, match="has 3 ids"):
        ranked_service_proc_id_from_env()


def test_slurm_job_takes_monarchs_signature(tmp_path: Path) -> None:
    job = SlurmJob({"trainers": 2, "judges": 1}, "/opt/py/bin/python", ["--constraint=a100"],
                   27000, "exp", 2, "1:00:00", "gpu", str(tmp_path / "slurm-logs"), True, 8,
                   cpus_per_task=4, mem="64G", job_start_timeout=90, account="acct",
                   qos="high", bind_to="10.0.0.7", name="s", cache_dir=tmp_path)
    assert job.meshes == {"trainers": 2, "judges": 1} and job.nodes == 3 and job.size == 6
    assert job.python == "/opt/py/bin/python" and job.port == 27000
    assert job.start_timeout == 90 and job._mesh_names() == ["trainers", "judges"]
    lines = job.script(tmp_path / "rdv").splitlines()
    for want in ("--job-name=exp", "--nodes=3", "--ntasks-per-node=2", "--partition=gpu",
                 "--time=1:00:00", "--gpus-per-node=8", "--cpus-per-task=4", "--mem=64G",
                 "--account=acct", "--qos=high", "--exclusive", "--constraint=a100",
                 f"--output={tmp_path / 'slurm-logs'}/slurm-%j.out"):
        assert f"#SBATCH {want}" in lines
    srun = next(ln for ln in lines if ln.startswith("srun "))
    assert "/opt/py/bin/python -m regency._job._boot --port 27000" in srun
    assert "--bind 10.0.0.7" in srun and "--advertise hostname" in srun
    # ranks in order: each mesh takes its nodes' tasks
    workers = [{"addr": f"tcp://n:{i}", "rank": i} for i in range(6)]
    assert [w["mesh"] for w in job._by_mesh(workers)] == ["trainers"] * 4 + ["judges"] * 2
    job.add_mesh("extra", 1)
    assert job.nodes == 4 and job._spec()["meshes"]["extra"] == 1


def test_slurm_job_keeps_regencys_form_and_checks_its_input(tmp_path: Path) -> None:
    job = SlurmJob(nodes=2, partition="cpu", python="/usr/bin/python3", port=0,
                   start_timeout=5, name="old", cache_dir=tmp_path)
    assert job.meshes == {"hosts": 2} and job.port == 0 and job.start_timeout == 5
    assert SlurmJob(out_of_cluster=True, cache_dir=tmp_path).advertise == "ip"
    with pytest.raises(ValueError, match="no worker gateway"):
        SlurmJob({"hosts": 1}, attach_to="tcp://gw:22222")
    with pytest.raises(ValueError, match="without a port"):
        SlurmJob({"hosts": 1}, bind_to="10.0.0.1:80")
    with pytest.raises(ValueError, match="not both"):
        SlurmJob({"hosts": 1}, nodes=2)
    with pytest.raises(ValueError, match="positive number of nodes"):
        SlurmJob({"hosts": 0})


def test_slurm_share_node_asks_sinfo_for_the_partitions_nodes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a stand-in for SLURM's sinfo (no SLURM here): a node of 64 CPUs, 512000 MB, 8 GPUs
    sinfo = tmp_path / "bin" / "sinfo"
    sinfo.parent.mkdir()
    sinfo.write_text("#!/bin/sh\necho '64 512000 gpu:a100:8(S:0-1)'\n")
    sinfo.chmod(sinfo.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{sinfo.parent}{os.pathsep}{os.environ['PATH']}")
    job = SlurmJob({"hosts": 2}, exclusive=True, cache_dir=tmp_path)
    job.share_node(tasks_per_node=2, gpus_per_task=2, partition="gpu")
    assert not job.exclusive and job.ntasks_per_node == 2
    assert job.options["partition"] == "gpu" and job.options["gpus-per-node"] == 4
    assert job.options["cpus-per-task"] == 16 and job.options["mem"] == "128000M"
    monkeypatch.setenv("PATH", "/nonexistent")
    other = SlurmJob({"hosts": 1}, cache_dir=tmp_path)
    other.share_node(1, 1, "gpu")
    assert other.options["cpus-per-task"] is None  # no sinfo: SLURM's defaults


def test_slurm_job_without_sbatch_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JobError, match="`sbatch` is not on PATH"):
        SlurmJob({"hosts": 1}, cache_dir=tmp_path)._preflight()


def test_job_names_default_per_kind_and_directory(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    a, b = ProcessJob({"hosts": 1}), JobTrait()  # Monarch's JobTrait() takes no name
    assert a.name.startswith("process-") and b.name.startswith("job-")
    assert a.name[-10:] == b.name[-10:]  # both hash this directory
    assert LocalJob().name == "local" and SlurmJob().name == "slurm"


def test_telemetry_and_admin_configs_have_monarchs_fields() -> None:
    cfg = TelemetryConfig()
    assert (cfg.retention_secs, cfg.include_dashboard, cfg.dashboard_port,
            cfg.snapshot_interval_secs) == (3600, False, 8265, 30.0)
    assert MeshAdminConfig().admin_addr is None
    job = ProcessJob({"hosts": 1}, name="t")
    assert job.enable_telemetry(retention_secs=5) is job
    assert job._telemetry_config == TelemetryConfig(retention_secs=5)
    assert job.enable_admin(admin_addr="127.0.0.1:0") is job
    with pytest.raises(RuntimeError, match="not running"):
        job.telemetry_query_client()
    with pytest.raises(TypeError):
        job.enable_telemetry(no_such_field=1)


def test_telemetry_retention_is_the_store_retention_policy() -> None:
    from regency import config
    from regency._job import _telemetry
    from regency._observe._retention import Retention

    values = _telemetry.component_config(TelemetryConfig(retention_secs=5), None)
    assert values["observe_retention_secs"] == 5.0
    with config.configured(**values):
        assert Retention.from_config().max_age_s == 5.0


def test_ssh_job_passes_each_hosts_labels_to_its_worker() -> None:
    from regency.job import SSHJob

    job = SSHJob(["a", "b"], labels=[{"rack": "r1"}, {"rack": "r 2", "zone": "z"}])
    assert job.remote_command(0).endswith("--advertise a --label rack=r1")
    assert job.remote_command(1).endswith("--label 'rack=r 2' --label zone=z")
    assert "--label" not in SSHJob(["a"]).remote_command(0)
    assert job._spec()["labels"] == [{"rack": "r1"}, {"rack": "r 2", "zone": "z"}]


@pytest.mark.parametrize(("labels", "words"), [
    ([{"rack": "r1"}], "one mapping per host (2)"),
    ({"rack": "r1"}, "one mapping per host"),
    ([{"a=b": "c"}, {}], "labels of host 'a': 'a=b'"),
    ([{}, {"x": "a,b"}], "labels of host 'b'"),
    ([{"hosts": "h"}, {}], "own dimension"),
    ([{"x": ""}, {}], "not key=value"),
])
def test_ssh_job_labels_are_checked(labels: Any, words: str) -> None:
    from regency.job import SSHJob

    with pytest.raises(ValueError, match=re.escape(words)):
        SSHJob(["a", "b"], labels=labels)
