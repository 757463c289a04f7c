"""``regency apply | context | kill | exec | shell`` in a scratch working directory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from regency._job import _cache
from regency._job._base import JobTrait
from regency.job import job_load

pytestmark = pytest.mark.timeout(180)

JOBS = """
from regency.job import ProcessJob
train = ProcessJob({"hosts": 2})

def small():
    return ProcessJob({"hosts": 1})

not_a_job = 3
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A directory with jobs.py; any job left recorded is killed at the end."""
    (tmp_path / "jobs.py").write_text(textwrap.dedent(JOBS))
    (tmp_path / "cache").mkdir()
    yield tmp_path
    for state in (tmp_path / "cache").glob("*.json"):
        recorded = _cache.load(tmp_path / "cache", state.stem)
        kind = JobTrait._kinds.get(str((recorded or {}).get("kind")))
        if recorded and kind is not None:
            kind._kill(recorded)


def regency(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
    env.update({"REGENCY_JOB_CACHE": str(cwd / "cache"), "PYTHONUNBUFFERED": "1"})
    return subprocess.run([sys.executable, "-m", "regency", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=150, input=stdin)


def family(state: Path) -> list[psutil.Process]:
    """The workers a pickled job records and all their descendants, now."""
    job = job_load(state)
    out: list[psutil.Process] = []
    for w in (job._recorded or {}).get("workers", []):
        try:
            p = psutil.Process(int(w["pid"]))
            out += [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return out


def test_apply_exec_shell_kill(project: Path) -> None:
    res = regency(project, "apply", "jobs.train")
    assert res.returncode == 0, res.stderr
    assert "Job is ready" in res.stdout and "hosts {'hosts': 2}" in res.stdout
    assert (project / ".regency" / "default" / "spec").read_text().strip() == "jobs.train"
    assert (project / ".regency" / "job_state.pkl").resolve() == (
        project / ".regency" / "default" / "state.pkl").resolve()

    res = regency(project, "exec", "--all", "-e", "K=V", "--",
                  "echo $K $REGENCY_RANK_hosts/$REGENCY_SIZE_hosts; exit $REGENCY_RANK_hosts")
    assert res.returncode == 1, res.stderr  # the worst exit status of the ranks
    assert "[exec {'hosts': 0}] V 0/2" in res.stdout
    assert "[exec {'hosts': 1}] V 1/2" in res.stdout
    assert "{'hosts': 0}: exit 0" in res.stderr and "{'hosts': 1}: exit 1" in res.stderr

    res = regency(project, "exec", "--", "sh", "-c", "pwd; kill -9 $$")  # --one: rank 0
    assert res.returncode == 137 and "killed by signal 9" in res.stderr
    assert f"[exec {{'hosts': 0}}] {project}" in res.stdout
    assert "'hosts': 1" not in res.stdout

    res = regency(project, "exec", "--point", "hosts=1", "--per-host", "gpus=2", "--all",
                  "--workdir", "/", "--", "echo $REGENCY_RANK_gpus; pwd")
    assert res.returncode == 0, res.stderr
    assert "[exec {'hosts': 1, 'gpus': 1}] /" in res.stdout
    assert "'hosts': 0" not in res.stdout

    # input from a pipe: sent as typed to the remote terminal, then Ctrl-D
    res = regency(project, "shell", "--point", "hosts=1",
                  stdin="cd /tmp\necho at-$(pwd)-rank-$REGENCY_RANK_hosts\nexit 3\n")
    assert res.returncode == 3, res.stderr
    assert "at-/tmp-rank-1" in res.stdout

    state = project / ".regency" / "default" / "state.pkl"
    procs = family(state)
    assert len(procs) >= 2
    res = regency(project, "kill")
    assert res.returncode == 0, res.stderr
    _, alive = psutil.wait_procs(procs, timeout=30)
    assert alive == [], f"kill left {alive}"
    assert not state.exists()
    res = regency(project, "exec", "--", "true")
    assert res.returncode == 2 and "run `regency apply module.attr` first" in res.stderr


def test_contexts_keep_their_own_jobs(project: Path) -> None:
    assert regency(project, "apply", "jobs.train").returncode == 0
    res = regency(project, "context", "create", "small", "jobs.small")
    assert res.returncode == 0 and "current: small" in res.stdout
    res = regency(project, "apply")  # the context's saved spec
    assert res.returncode == 0 and "{'hosts': 1}" in res.stdout, res.stderr
    default = family(project / ".regency" / "default" / "state.pkl")
    assert default and all(p.is_running() for p in default), "contexts share no workers"
    ls = regency(project, "context", "ls").stdout
    assert "* small" in ls and "  default" in ls and "running" in ls
    small = family(project / ".regency" / "small" / "state.pkl")
    assert regency(project, "context", "rm", "small").returncode == 0  # kills its job
    assert psutil.wait_procs(small, timeout=30)[1] == []
    assert not (project / ".regency" / "small").exists()
    assert regency(project, "context", "use", "default").returncode == 0
    assert regency(project, "kill").returncode == 0
    assert psutil.wait_procs(default, timeout=30)[1] == []


@pytest.mark.parametrize(("args", "says"), [
    (["apply"], "no job spec for context 'default'"),
    (["apply", "nomodule.job"], "cannot import 'nomodule'"),
    (["apply", "jobs.nope"], "module 'jobs' has no 'nope'"),
    (["apply", "jobs.not_a_job"], "is a int, not a job"),
    (["context", "use", "nowhere"], "no context 'nowhere'"),
    (["kill"], "no job in context 'default'"),
    (["exec", "--all"], "no command"),
])
def test_bad_input_says_what_to_do(project: Path, args: list[str], says: str) -> None:
    res = regency(project, *args)
    assert res.returncode == 2 and says in res.stderr, res.stderr


@pytest.mark.parametrize("command", ["apply", "kill", "context", "exec", "shell"])
def test_every_command_has_an_example_in_its_help(tmp_path: Path, command: str) -> None:
    res = regency(tmp_path, command, "--help")
    assert res.returncode == 0 and "Example:" in res.stdout and "regency " in res.stdout


def test_set_and_load_current_job(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from regency.job import ProcessJob, load_current_job, set_current_job

    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the spec's import adds the cwd
    monkeypatch.setitem(sys.modules, "jobs", None)  # a cached `jobs` is not this one's
    del sys.modules["jobs"]
    with pytest.raises(FileNotFoundError, match="regency apply"):
        load_current_job()
    set_current_job("jobs.small")
    job = load_current_job()
    assert isinstance(job, ProcessJob) and job.meshes == {"hosts": 1}
    assert (project / ".regency" / "job_state.pkl").is_symlink()


def test_shell_is_a_terminal_on_the_remote_host(project: Path) -> None:
    """``regency shell`` through a pseudo-terminal: a tty there, Ctrl-C interrupts the
    foreground program only, a resize reaches it, and the exit status comes back."""
    pexpect = pytest.importorskip("pexpect")
    assert regency(project, "apply", "jobs.train").returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
    env.update({"REGENCY_JOB_CACHE": str(project / "cache"), "PYTHONUNBUFFERED": "1",
                "TERM": "xterm"})
    child = pexpect.spawn(sys.executable, ["-m", "regency", "shell", "--point", "hosts=1"],
                          cwd=str(project), env=env, timeout=90, encoding="utf-8",
                          dimensions=(30, 100))
    try:
        child.expect("regency shell on")
        child.expect(r"[#$] ")  # the remote shell's prompt: it reads what is typed now
        child.sendline("tty; echo rank-$REGENCY_RANK_hosts-$$")
        child.expect(r"/dev/pts/\d+")
        child.expect(r"rank-1-(\d+)")
        shell_pid = int(child.match.group(1))
        assert shell_pid != child.pid  # the shell runs on the worker, not here
        child.sendline("stty size")
        child.expect(r"30 100")
        child.setwinsize(40, 120)  # SIGWINCH here: the remote terminal is resized
        child.sendline("stty size")
        child.expect(r"40 120")
        # the program says when it runs: by then it is the terminal's foreground group
        # (a Ctrl-C right after the line's echo could reach the shell before the fork)
        child.sendline("sh -c 'echo fg-$((6*7)); exec sleep 300'; echo not-interrupted")
        child.expect_exact("fg-42")
        child.sendcontrol("c")  # SIGINT to the remote foreground program, not to us
        child.sendline("echo after-$?")
        child.expect(r"after-130")
        child.sendline("exit 5")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 5
    regency(project, "kill")
