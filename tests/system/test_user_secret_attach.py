"""With no secret configured, a controller attaches to a worker of the same user (as Monarch
does), authenticated by the user's secret file, which both make or read at the same time."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

CONTROLLER = r"""
import sys
from regency.actor import Actor, attach_to_workers, context, endpoint, current_rank
context()  # starts the runtime now: it races the worker for the user's secret file
address = sys.stdin.readline().strip()

class Echo(Actor):
    @endpoint
    def rank(self) -> int:
        return current_rank().rank

hosts = attach_to_workers([address])
procs = hosts.spawn_procs(per_host={"gpus": 2})
print("ranks", sorted(procs.spawn("echo", Echo).rank.call().get(timeout=60).values()),
      flush=True)
hosts.shutdown()
"""


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGENCY_SECRET")}
    env.update(XDG_CONFIG_HOME=str(home), PYTHONUNBUFFERED="1")
    return env


def test_attach_with_no_secret_configured(tmp_path: Path) -> None:
    env = _env(tmp_path)
    worker = subprocess.Popen(
        [sys.executable, "-m", "regency", "worker", "--listen", "tcp://127.0.0.1:0",
         "--advertise", "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=env, start_new_session=True)
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=env, start_new_session=True)
    try:
        assert worker.stdout is not None and controller.stdin is not None
        seen = []
        for line in worker.stdout:
            seen.append(line)
            if "regency worker listening on" in line:
                break
        else:
            raise AssertionError("the worker exited:\n" + "".join(seen))
        controller.stdin.write(line.rsplit(" ", 1)[1])
        controller.stdin.flush()
        out, _ = controller.communicate(timeout=90)
        assert controller.returncode == 0, out
        assert "ranks [0, 1]" in out
        assert worker.wait(timeout=30) == 0  # shutdown() made it exit
    finally:
        for proc in (controller, worker):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    path = tmp_path / "regency" / "secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(path.parent) == ["secret"]


def test_an_explicit_secret_still_wins(tmp_path: Path) -> None:
    """A worker with REGENCY_SECRET refuses a controller that only has the user's file."""
    env = _env(tmp_path)
    worker = subprocess.Popen(
        [sys.executable, "-m", "regency", "worker", "--listen", "tcp://127.0.0.1:0",
         "--advertise", "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env={**env, "REGENCY_SECRET": "explicit"}, start_new_session=True)
    try:
        assert worker.stdout is not None
        line = next(ln for ln in worker.stdout if "listening on" in ln)
        code = ("import sys\nfrom regency.actor import attach_to_workers\n"
                "try:\n    attach_to_workers([sys.argv[1]])\n"
                "except Exception as exc:\n    print('refused:', exc)\n")
        out = subprocess.run([sys.executable, "-c", code, line.rsplit(" ", 1)[1].strip()],
                             capture_output=True, text=True, env=env, timeout=90).stdout
        assert "refused:" in out and "authentication" in out.lower(), out
    finally:
        worker.kill()
        worker.wait(timeout=30)
