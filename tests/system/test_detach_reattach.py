"""A proc mesh detached from its controller outlives it, on real worker hosts, and the next
controller takes it over with its actors' state: after a clean exit, after a SIGKILL of the
controller, with a rank that died in between; what is not detached still ends with its
controller, and bad requests say what to do."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import psutil
from _scripts import describe, kill_tagged, loopback_worker, run_script

COMMON = """
import json, os, signal, sys
import regency.actor as ra
from regency.actor import Actor, attach_to_workers, current_rank, endpoint
from regency.errors import SupervisionError

class Counter(Actor):
    def __init__(self) -> None:
        self.n = 0

    @endpoint
    def incr(self) -> int:
        self.n += 1
        return self.n

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def child(self) -> int:  # an actor's own procs: kept with the proc that owns them
        self.kid = ra.this_host().spawn_procs(name="kid").spawn("kid", Counter)
        return self.kid.pid.call_one().get()

    @endpoint
    def kid_count(self) -> int:
        return self.kid.incr.call_one().get()

    @endpoint
    def shout(self) -> None:
        print(f"shout from rank {current_rank().rank}")

    @endpoint
    def kid_root(self) -> str:  # the kid reaches the controller that is its root now
        return self.kid.root_echo.call_one().get()

    @endpoint
    def root_echo(self) -> str:
        return ra.get_or_spawn_controller("echo", Echo).get().hello.call_one().get()


class Echo(Actor):
    @endpoint
    def hello(self) -> str:
        return f"echo from {os.getpid()}"

hosts = attach_to_workers(sys.argv[1:])

def say(**what):
    print("RESULT " + json.dumps(what), flush=True)
"""

FIRST = COMMON + """
procs = hosts.spawn_procs(per_host={"gpus": 2}, name="trainers")
counters = procs.spawn("counter", Counter)
for _ in range(3):
    counters.incr.call().get()
procs.detach()
later = procs.spawn("later", Counter)          # spawned after detach(): kept too
later.incr.call().get()
other = hosts.spawn_procs(per_host={"gpus": 1}, name="scratch")   # not detached
kid = counters.slice(hosts=1, gpus=1).child.call_one().get()
say(pids=list(counters.pid.call().get().values()), kid=kid,
    scratch=list(other.spawn("c", Counter).pid.call().get().values()))
if os.environ.get("END") == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
"""

SECOND = COMMON + """
failures = []
ra.unhandled_fault_hook = lambda failure: failures.append(failure.report())
names = hosts.detached_procs()
procs = hosts.reattach_procs("trainers")
meshes = procs.actor_meshes()
out = {"names": names, "meshes": sorted(meshes), "extent": dict(procs.sizes)}
counters = meshes["counter"]
if os.environ.get("DEAD"):
    try:
        counters.incr.call().get()
    except SupervisionError as exc:
        out["dead"] = str(exc)
    out["respawned"] = procs.respawn()
    out["after_respawn"] = sorted(counters.incr.call().get().values())
else:
    out["counts"] = list(counters.incr.call().get().values())
    out["later"] = list(meshes["later"].incr.call().get().values())
    out["kid"] = counters.slice(hosts=1, gpus=1).kid_count.call_one().get()
    out["kid_root"] = counters.slice(hosts=1, gpus=1).kid_root.call_one().get()
    out["me"] = os.getpid()
    counters.shout.call().get()
    out["logs"] = procs.logs(tail=1).of(3)
    out["stacks"] = str(procs.stacks(timeout=30.0))
out["pids"] = list(counters.pid.call().get().values())
out["failures"] = failures
if os.environ.get("AGAIN"):
    procs.detach()
out["left"] = hosts.detached_procs()
say(**out)
"""


def _result(run) -> dict:
    assert run.returncode == 0, describe(run)
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[7:])


@contextlib.contextmanager
def _two_workers(**more: str) -> Iterator[tuple[dict[str, str], list[str]]]:
    env = {**os.environ, "REGENCY_SECRET": "detach-reattach", "PYTHONUNBUFFERED": "1",
           **more}
    with loopback_worker(env) as (_, a), loopback_worker(env) as (_, b):
        yield env, [a, b]


def _args(script: str, workers: list[str]) -> str:
    return script.replace("sys.argv[1:]", repr(workers))


def _gone(pids: list[int]) -> None:
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    _, alive = psutil.wait_procs(procs, timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive


def _reattach(tmp_path, env, workers, end: str) -> None:
    first = run_script(tmp_path, _args(FIRST, workers), env={**env, "END": end}, timeout=90)
    try:
        if end == "sigkill":
            assert first.returncode == -9, describe(first)
            first = dataclasses.replace(first, returncode=0)
        before = _result(first)
        _gone(before["scratch"])  # not detached: ended with its controller
        assert all(psutil.pid_exists(p) for p in before["pids"])
        assert psutil.pid_exists(before["kid"])
        second = run_script(tmp_path, _args(SECOND, workers), env={**env, "AGAIN": "1"},
                            timeout=90)
        after = _result(second)
        assert after["names"] == ["trainers"]
        assert after["meshes"] == ["counter", "later"]
        assert after["extent"] == {"hosts": 2, "gpus": 2}
        assert after["counts"] == [4, 4, 4, 4]  # the actors' state lived on
        assert after["later"] == [2, 2, 2, 2]
        assert after["kid"] == 1
        assert after["kid_root"] == f"echo from {after['me']}"  # its root is the second
        assert after["pids"] == before["pids"]
        assert after["failures"] == [] and after["left"] == ["trainers"]
        for rank in range(4):  # their output reaches the new controller's terminal
            assert f"shout from rank {rank}" in second.stdout, describe(second)
        assert after["logs"] == ["shout from rank 3"]
        assert "in trainers ranks 0-3" in after["stacks"], after["stacks"]  # every proc's
        third = run_script(tmp_path, _args(SECOND, workers), env=env, timeout=90)
        last = _result(third)  # detached again by the second: the third takes it over
        assert last["counts"] == [5, 5, 5, 5] and last["kid"] == 2
        assert last["left"] == []
        _gone(before["pids"] + [before["kid"]])  # not detached again: ended with the third
    finally:
        kill_tagged(first.tag)


def test_a_detached_mesh_outlives_a_controller_that_exits(tmp_path) -> None:
    with _two_workers() as (env, workers):
        _reattach(tmp_path, env, workers, end="exit")


def test_a_detached_mesh_outlives_a_controller_killed_by_sigkill(tmp_path) -> None:
    with _two_workers() as (env, workers):
        _reattach(tmp_path, env, workers, end="sigkill")


def test_a_rank_that_died_while_detached_fails_at_reattach_and_respawns(tmp_path) -> None:
    with _two_workers() as (env, workers):
        first = run_script(tmp_path, _args(FIRST, workers), env=env, timeout=90)
        try:
            before = _result(first)
            victim = psutil.Process(before["pids"][1])
            victim.kill()
            victim.wait(timeout=30)
            second = run_script(tmp_path, _args(SECOND, workers), env={**env, "DEAD": "1"},
                                timeout=90)
            after = _result(second)
            assert "killed by signal SIGKILL" in after["dead"], after
            assert "while no controller was attached" in after["dead"], after
            assert after["respawned"] == [1]
            assert after["after_respawn"] == [1, 4, 4, 4]  # a new actor at rank 1
            # the proc mesh and both actor meshes on it, as for a rank that dies any time
            assert len(after["failures"]) == 3, after["failures"]
            assert all("SIGKILL while no controller was attached" in f
                       for f in after["failures"]), after["failures"]
            assert after["pids"][0] == before["pids"][0]
            assert after["pids"][1] != before["pids"][1]
        finally:
            kill_tagged(first.tag)


def test_a_rank_respawned_in_two_generations_gets_a_new_address_each_time(tmp_path) -> None:
    with _two_workers() as (env, workers):
        first = run_script(tmp_path, _args(FIRST, workers), env=env, timeout=90)
        try:
            pids = _result(first)["pids"]
            for generation in range(2):  # each controller respawns rank 1 and detaches
                victim = psutil.Process(pids[1])
                victim.kill()
                victim.wait(timeout=30)
                run = run_script(tmp_path, _args(SECOND, workers),
                                 env={**env, "DEAD": "1", "AGAIN": "1"}, timeout=90)
                out = _result(run)
                assert out["respawned"] == [1], (generation, out)
                assert out["pids"][0] == pids[0] and out["pids"][1] != pids[1]
                pids = out["pids"]
        finally:
            kill_tagged(first.tag)


MISTAKES = COMMON + """
from regency.actor import this_host
out = {}
handed = hosts.spawn_procs(name="handed")
handed.detach()
hosts.stop()                               # handed over to the next controller
out["released"] = hosts.detached_procs.__name__
try:
    hosts.detached_procs()
except RuntimeError as exc:
    out["released"] = str(exc)
hosts = attach_to_workers(sys.argv[1:])    # attached again: the next controller is us
try:
    hosts.reattach_procs("handed")
except ValueError as exc:
    out["taken_back"] = str(exc)
local = this_host().spawn_procs(name="here")
try:
    local.detach()
except ValueError as exc:
    out["local"] = str(exc)
try:
    hosts.reattach_procs("nothing")
except ValueError as exc:
    out["unknown"] = str(exc)
try:
    this_host().reattach_procs("nothing")
except ValueError as exc:
    out["this_host"] = str(exc)
say(**out)
"""


def test_mistakes_are_refused_with_what_to_do(tmp_path) -> None:
    env = {**os.environ, "REGENCY_SECRET": "detach-mistakes", "PYTHONUNBUFFERED": "1"}
    with loopback_worker(env) as (_, address):
        run = run_script(tmp_path, _args(MISTAKES, [address]), env=env, timeout=90)
    try:
        out = _result(run)
        assert "this controller's own host" in out["local"]
        assert "attach_to_workers" in out["local"]
        assert "keep no detached proc mesh of that name; they keep: handed (" in \
            out["unknown"]
        assert "no proc outlives its controller" in out["this_host"]
        assert "are not attached to this controller (released by hosts.stop()" in \
            out["released"]
        assert "this controller handed it over" in out["taken_back"]
        assert "another controller (a new process)" in out["taken_back"]
    finally:
        kill_tagged(run.tag)


TWINS = COMMON + """
a = hosts.spawn_procs(per_host={"gpus": 1}, name="dup")
b = hosts.spawn_procs(per_host={"gpus": 1}, name="dup")
a.spawn("counter", Counter).incr.call().get()
a.detach()
b.detach()
say(uids=[a._uid, b._uid])
"""

TAKE_TWINS = COMMON + """
out = {}
try:
    hosts.reattach_procs("dup")
except ValueError as exc:
    out["several"] = str(exc)
uid = os.environ["UID"]
try:
    hosts.slice(hosts=0).reattach_procs(uid)
except ValueError as exc:
    out["part"] = str(exc)
procs = hosts.reattach_procs(uid)
out["count"] = list(procs.actor_meshes()["counter"].incr.call().get().values())
out["left"] = hosts.detached_procs()
say(**out)
"""


def test_twins_are_told_apart_by_uid_and_a_mesh_needs_all_its_hosts(tmp_path) -> None:
    with _two_workers() as (env, workers):
        first = run_script(tmp_path, _args(TWINS, workers), env=env, timeout=90)
        try:
            uids = _result(first)["uids"]
            run = run_script(tmp_path, _args(TAKE_TWINS, workers), env={**env, "UID": uids[0]},
                             timeout=90)
            out = _result(run)
            assert "several detached proc meshes of that name" in out["several"]
            assert all(uid in out["several"] for uid in uids)
            assert "which this host mesh does not hold" in out["part"], out
            assert out["count"] == [2, 2]
            assert out["left"] == ["dup"]  # the other twin, still kept
        finally:
            kill_tagged(first.tag)


DEATHS_AND_STOPS = COMMON + """
import threading
heard = threading.Event()
ra.unhandled_fault_hook = lambda failure: heard.set()   # the first controller lets it go
died = hosts.spawn_procs(per_host={"gpus": 1}, name="died")
c = died.spawn("counter", Counter)
pid = c.pid.call().get()[{"hosts": 1, "gpus": 0}]
os.kill(pid, signal.SIGKILL)
assert heard.wait(60)                           # its host has reported it by then
died.detach()                                   # detached after a rank died
half = hosts.spawn_procs(per_host={"gpus": 1}, name="half")
half.detach()
half.slice(hosts=1).stop().get()                # detached, then a slice stopped
mixed = hosts.spawn_procs(per_host={"gpus": 1}, name="mixed")
mixed.detach()
gone, kept, part = (mixed.spawn(n, Counter) for n in ("gone", "kept", "part"))
twins = [mixed.spawn("twin", Counter) for _ in range(2)]
gone.stop().get()
part.slice(hosts=0).stop().get()
kept.incr.call().get()
say(ok=True)
"""

TAKE_DEATHS_AND_STOPS = COMMON + """
failures = []
ra.unhandled_fault_hook = lambda failure: failures.append(failure.report())
out = {"names": hosts.detached_procs()}
died = hosts.reattach_procs("died")
out["failures"] = failures
out["respawned"] = died.respawn()
out["died"] = sorted(died.actor_meshes()["counter"].incr.call().get().values())
half = hosts.reattach_procs("half")
out["half_meshes"] = sorted(half.actor_meshes())
mixed = hosts.reattach_procs("mixed")
meshes = mixed.actor_meshes()
out["mixed"] = sorted(k for k in meshes if not k.startswith("twin-"))
out["twins"] = sorted(m._uid for k, m in meshes.items() if k.startswith("twin-"))
out["twin_keys"] = sorted(k for k in meshes if k.startswith("twin-"))
try:
    meshes["part"].incr.call().get()
except SupervisionError as exc:
    out["part"] = str(exc)
out["part_rank1"] = meshes["part"].slice(hosts=1).incr.call_one().get()
out["kept"] = sorted(meshes["kept"].incr.call().get().values())
say(**out)
"""


def test_deaths_before_detach_and_stops_after_it_are_taken_over_as_they_are(tmp_path) -> None:
    with _two_workers() as (env, workers):
        first = run_script(tmp_path, _args(DEATHS_AND_STOPS, workers), env=env, timeout=90)
        try:
            assert _result(first)["ok"]
            second = run_script(tmp_path, _args(TAKE_DEATHS_AND_STOPS, workers), env=env,
                                timeout=90)
            out = _result(second)
            assert out["names"] == ["died", "half", "mixed"]
            assert len(out["failures"]) == 2, out["failures"]  # the proc mesh, its actors
            assert all("killed by signal SIGKILL" in f and "while no controller" not in f
                       for f in out["failures"]), out["failures"]
            assert out["respawned"] == [1] and out["died"] == [1, 1]
            assert out["half_meshes"] == []
            assert out["mixed"] == ["kept", "part"]  # "gone" was stopped before
            assert len(out["twins"]) == 2 and out["twin_keys"] == out["twins"]  # by uid
            assert "were stopped" in out["part"], out
            assert out["part_rank1"] == 1 and out["kept"] == [2, 2]
        finally:
            kill_tagged(first.tag)


HANDED_OVER = COMMON + """
procs = hosts.spawn_procs(per_host={"gpus": 1}, name="shared")
counters = procs.spawn("counter", Counter)
counters.incr.call().get()
procs.detach()
hosts.stop().get()              # released: the next controller may take it over
say(released=True)
sys.stdin.readline()            # until the next controller has taken it over
try:
    counters.incr.call().get()
except SupervisionError as exc:
    say(refused=str(exc))
"""

TAKE_HANDED_OVER = COMMON + """
procs = hosts.reattach_procs("shared")
say(count=list(procs.actor_meshes()["counter"].incr.call().get().values()))
"""


def test_a_released_controller_no_longer_calls_the_mesh_it_handed_over(tmp_path) -> None:
    with _two_workers() as (env, workers):
        script = tmp_path / "first" / "script.py"
        script.parent.mkdir()
        script.write_text(_args(HANDED_OVER, workers))
        first = subprocess.Popen([sys.executable, str(script)], env=env, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert first.stdout is not None and first.stdin is not None
            assert "released" in first.stdout.readline()
            second = run_script(tmp_path, _args(TAKE_HANDED_OVER, workers), env=env,
                                timeout=90)
            assert _result(second)["count"] == [2, 2]
            out, _ = first.communicate("go\n", timeout=60)
            assert "handed over" in out and "refused" in out, out
        finally:
            first.kill()
            first.wait()


BLOCKED = COMMON + """
class Stuck(Actor):
    @endpoint
    async def block(self) -> None:
        time.sleep(3600)            # holds its proc's event loop

procs = hosts.spawn_procs(per_host={"gpus": 1}, name="stuck")
stuck = procs.spawn("stuck", Stuck)
procs.detach()
stuck.slice(hosts=0).block.broadcast()
say(ok=True)
"""

TAKE_BLOCKED = COMMON + """
failures = []
ra.unhandled_fault_hook = lambda failure: failures.append(failure.report())
procs = hosts.reattach_procs("stuck")
say(failures=failures, respawned=procs.respawn())
"""


def test_a_proc_that_does_not_answer_the_takeover_fails_and_can_be_respawned(tmp_path) -> None:
    with _two_workers() as (env, workers):
        first = run_script(tmp_path, "import time\n" + _args(BLOCKED, workers), env=env,
                           timeout=90)
        try:
            assert _result(first)["ok"]
            second = run_script(tmp_path, "import time\n" + _args(TAKE_BLOCKED, workers),
                                env={**env, "REGENCY_CONNECT_TIMEOUT": "5"}, timeout=90)
            out = _result(second)
            assert any("was not taken over: it did not answer within 5s" in f
                       for f in out["failures"]), out["failures"]
            assert out["respawned"] == [0]
        finally:
            kill_tagged(first.tag)


UNLOADABLE = COMMON + """
sys.path.insert(0, os.environ["ONLY_HERE"])
from only_here import Local

procs = hosts.spawn_procs(per_host={"gpus": 1}, name="mixed")
procs.spawn("local", Local).incr.call().get()
procs.spawn("counter", Counter).incr.call().get()
procs.detach()
say(ok=True)
"""

TAKE_UNLOADABLE = COMMON + """
import warnings
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    procs = hosts.reattach_procs("mixed")
meshes = procs.actor_meshes()
say(meshes=sorted(meshes), warned=[str(w.message) for w in seen],
    count=list(meshes["counter"].incr.call().get().values()))
"""


def test_an_actor_class_that_does_not_load_here_is_skipped_with_a_warning(tmp_path) -> None:
    only = tmp_path / "only"
    only.mkdir()
    (only / "only_here.py").write_text(
        "from regency.actor import Actor, endpoint\n\n"
        "class Local(Actor):\n"
        "    @endpoint\n"
        "    def incr(self) -> int:\n"
        "        return 1\n")
    with _two_workers(PYTHONPATH=str(only)) as (env, workers):
        env = {**env, "ONLY_HERE": str(only)}
        first = run_script(tmp_path, _args(UNLOADABLE, workers), env=env, timeout=90)
        try:
            assert _result(first)["ok"]
            env.pop("PYTHONPATH")
            second = run_script(tmp_path, _args(TAKE_UNLOADABLE, workers), env=env,
                                timeout=90)
            out = _result(second)
            assert out["meshes"] == ["counter"] and out["count"] == [2, 2]
            assert any("actor mesh 'local' is not adopted" in w and "only_here" in w
                       for w in out["warned"]), out["warned"]
        finally:
            kill_tagged(first.tag)
