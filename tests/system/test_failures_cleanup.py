"""No orphans, clean Ctrl-C, and ``__cleanup__(exc)`` (issue 3, item 7).

* After SIGKILL of the controller every proc it started exits within 5 s, and so does
  every process an actor started (``_descendants``).
* After SIGKILL of a proc, the procs its actors spawned go too.
* Ctrl-C in the controller stops everything with one short message, no stack-trace flood.
* ``__cleanup__(exc)`` receives the original exception when an actor stops on an error.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from _failure_actors import AsyncVictim, Parent, Victim
from _failure_scripts import Controller, descendants, kill_tagged, poll, tagged, wait_gone

from regency.actor import this_host

T = 20
ORPHANS_GONE_S = 5.0




@pytest.fixture
def controllers():
    """Controllers started by a test; killed (with whatever they left) at the end."""
    started: list[Controller] = []
    yield started
    for c in started:
        c.kill()
        kill_tagged(c.tag)


NESTED = """
class Spawner(Actor):
    @endpoint
    def start(self):
        self.procs = this_host().spawn_procs(per_host={"kids": 2}, name="grandkids")
        self.kids = self.procs.spawn("kids", Victim)
        return list(self.kids.pid.call().get(timeout=20).values())

procs, victims = spawn_victims(2)
pids = list(victims.pid.call().get(timeout=20).values())
spawner = this_host().spawn_procs(per_host={"s": 1}, name="spawner").spawn("spawner", Spawner)
nested = spawner.start.call_one().get(timeout=20)
local = this_proc().spawn("local", Victim)
local.ping.call_one().get(timeout=20)
sleeps = victims.slice(gpus=0).sleeps.call_one().get(timeout=20)  # what an actor started
print("READY", *pids, *nested, *sleeps, flush=True)
time.sleep(60)
"""


def test_sigkill_of_the_controller_leaves_no_process_behind(tmp_path, controllers) -> None:
    c = Controller(tmp_path, NESTED)
    controllers.append(c)
    ready = c.wait_line("READY")
    procs = [int(p) for p in ready.split()[1:]]
    family = descendants(c.pid)
    assert set(procs) <= set(family), (procs, family)
    c.send(signal.SIGKILL)
    c.wait()
    left, took = wait_gone(family, ORPHANS_GONE_S)
    assert not left, f"still alive {ORPHANS_GONE_S}s after the controller died: {left}"
    assert not [p.pid for p in tagged(c.tag)]
    assert took < ORPHANS_GONE_S


def test_sigkill_of_a_parent_actors_proc_takes_its_child_procs_along(unhandled_failures) -> None:
    procs = this_host().spawn_procs(per_host={"p": 1}, name="parents")
    try:
        parent = procs.spawn("parent", Parent)
        kids = parent.start.call_one(2).get(timeout=T)
        parent_pid = parent.pid.call_one().get(timeout=T)
        os.kill(parent_pid, signal.SIGKILL)
        left, took = wait_gone(kids, ORPHANS_GONE_S)
        assert not left, f"child procs outlived their parent's proc by {took:.1f}s: {left}"
        reports = poll(unhandled_failures)
        assert any("SIGKILL" in f.cause for f in reports)
    finally:
        procs.stop().get(timeout=T)


CTRL_C = """
from regency.testing import drop_calls

class Tidy(Victim):
    def __cleanup__(self, exc):
        rank = __import__("regency.actor").actor.context().actor_instance.rank.rank
        with open(f"cleaned.{rank}", "w") as f:
            f.write(repr(exc))

procs = this_host().spawn_procs(per_host={"gpus": 2}, name="tidy")
tidy = procs.spawn("tidy", Tidy)
tidy.ping.call("warm").get(timeout=20)
print("READY", *tidy.pid.call().get(timeout=20).values(), flush=True)
if MODE == "sleep":
    time.sleep(60)
elif MODE == "get":
    drop_calls(tidy.ping, ranks=[0])
    tidy.slice(gpus=0).ping.call_one("never").get()
elif MODE == "busy":
    tidy.slice(gpus=0).sleep.call_one(60).get()
"""


def _ctrl_c(tmp_path, controllers, mode: str) -> tuple[Controller, int, float, list[int]]:
    c = Controller(tmp_path, f"MODE = {mode!r}\n" + CTRL_C)
    controllers.append(c)
    pids = [int(p) for p in c.wait_line("READY").split()[1:]]
    family = descendants(c.pid)
    sent = c.send(signal.SIGINT)
    code = c.wait(timeout=15)
    took = time.monotonic() - sent
    left, _ = wait_gone(family, ORPHANS_GONE_S)
    assert not left, f"left running after Ctrl-C: {left}\n{c.text()}"
    return c, code, took, pids


def _assert_one_short_message(c: Controller, code: int) -> None:
    assert code in (130, -signal.SIGINT), f"exit status {code}\n{c.text()}"
    err = [ln for ln in c.stderr if ln.strip()]
    assert len(err) == 1, "stderr is not one short message:\n" + c.text()
    assert "interrupted" in err[0] and len(err[0]) < 120, c.text()


@pytest.mark.parametrize("mode", ["sleep", "get"])
def test_ctrl_c_stops_everything_with_one_short_message(tmp_path, controllers, mode) -> None:
    c, code, took, _ = _ctrl_c(tmp_path, controllers, mode)
    _assert_one_short_message(c, code)
    assert took < 3.0, f"Ctrl-C took {took:.1f}s\n{c.text()}"
    for rank in (0, 1):  # idle actors were stopped gracefully: __cleanup__(None) ran
        assert (tmp_path / f"cleaned.{rank}").read_text() == "None", c.text()


def test_ctrl_c_while_an_actor_is_busy_is_still_one_short_message(tmp_path,
                                                                   controllers) -> None:
    c, code, took, _ = _ctrl_c(tmp_path, controllers, "busy")
    assert took < ORPHANS_GONE_S, f"Ctrl-C took {took:.1f}s\n{c.text()}"
    _assert_one_short_message(c, code)


def test_ctrl_c_again_while_the_meshes_stop_exits_at_once_without_a_traceback(
        tmp_path, controllers) -> None:
    """The first Ctrl-C stops the meshes (a busy actor gets 3 s); a second one in that time
    exits at once: one more short line, no traceback of regency's exit hook."""
    c = Controller(tmp_path, "MODE = 'busy'\n" + CTRL_C)
    controllers.append(c)
    c.wait_line("READY")
    family = descendants(c.pid)
    c.send(signal.SIGINT)
    deadline = time.monotonic() + 15
    while not any("interrupted" in ln for ln in c.stderr) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        c.send(signal.SIGINT)
    except ProcessLookupError:
        pass  # it was quicker (nothing to check of the second Ctrl-C then)
    code = c.wait(timeout=15)
    left, _ = wait_gone(family, ORPHANS_GONE_S)
    assert not left, f"left running after Ctrl-C twice: {left}\n{c.text()}"
    assert code in (130, -signal.SIGINT), f"exit status {code}\n{c.text()}"
    err = [ln for ln in c.stderr if ln.strip()]
    assert not any("Traceback" in ln for ln in err) and len(err) <= 2, c.text()


# -- __cleanup__(exc) ---------------------------------------------------------------------------
@pytest.fixture
def procs2():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="cleanup")
    yield procs
    procs.stop().get(timeout=T)


def written(path: Path) -> str:
    """The text of a marker file once it has some: ``write_text`` creates the file before it
    writes, so a file that exists may still be empty for a moment."""
    return str(poll(lambda: path.exists() and path.read_text()))


@pytest.mark.parametrize("how,expected", [
    ("boom", "ValueError|ValueError('fatal for cleanup')"),
    ("base_exception", "Abort|Abort('a BaseException from an endpoint')"),
    ("system_exit", "SystemExit|SystemExit(4)"),
])
def test_cleanup_receives_the_original_exception(procs2, unhandled_failures, tmp_path,
                                                 how, expected) -> None:
    marker = tmp_path / "cleanup"
    mesh = procs2.spawn(f"cleanup_{how}", Victim, False, str(marker))
    mesh.ping.call().get(timeout=T)
    endpoint = getattr(mesh.slice(gpus=1), how)
    endpoint.broadcast(*(["fatal for cleanup"] if how == "boom" else []))
    done = tmp_path / "cleanup.1"
    assert written(done) == expected
    assert not (tmp_path / "cleanup.0").exists()  # rank 0 did not stop
    mesh.stop().get(timeout=T)
    assert (tmp_path / "cleanup.0").read_text() == "NoneType|None"  # a graceful stop


def test_async_cleanup_receives_the_original_exception(procs2, unhandled_failures,
                                                       tmp_path) -> None:
    marker = tmp_path / "acleanup"
    mesh = procs2.spawn("acleanup", AsyncVictim, str(marker))
    mesh.ping.call().get(timeout=T)
    mesh.slice(gpus=0).boom.broadcast("fatal for async cleanup")
    done = tmp_path / "acleanup.0"
    assert written(done) == "ValueError|ValueError('fatal for async cleanup')"
