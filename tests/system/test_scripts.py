"""Whole programs in a subprocess: classes in ``__main__``, proc output at the controller,
clean exits that leave no process behind."""

from __future__ import annotations

import re

import pytest
from _scripts import describe, kill_tagged, run_script, wait_no_tagged


@pytest.fixture
def reap():
    """Kill whatever a script left behind, after the test looked at it."""
    tags: list[str] = []
    yield tags
    for tag in tags:
        kill_tagged(tag)


MAIN_CLASS_RAISES = """
from regency.actor import Actor, ActorError, endpoint, this_host

class Boom(Actor):
    def __init__(self, factor):
        self.factor = factor

    @endpoint
    def ok(self, x):
        return x * self.factor

    @endpoint
    def explode(self, x):
        return helper_that_raises(x)

def helper_that_raises(x):
    raise ZeroDivisionError(f"exploded with {x}")

procs = this_host().spawn_procs(per_host={"gpus": 2})
booms = procs.spawn("booms", Boom, 3)
print("OK", list(booms.ok.call(2).get(timeout=20).values()), flush=True)
try:
    booms.explode.call(7).get(timeout=20)
except ActorError as e:
    print("CAUGHT", type(e.exception).__name__, flush=True)
    print("TEXT-BEGIN")
    print(str(e))
    print("TEXT-END", flush=True)
print("AFTER", booms.slice(gpus=1).ok.call_one(5).get(timeout=20), flush=True)
procs.stop().get(timeout=20)
print("DONE", flush=True)
"""


def test_main_class_error_reaches_the_controller_with_the_remote_traceback(tmp_path, reap):
    run = run_script(tmp_path, MAIN_CLASS_RAISES)
    reap.append(run.tag)
    assert run.returncode == 0, describe(run)
    assert "OK [6, 6]" in run.stdout, describe(run)
    assert "CAUGHT ZeroDivisionError" in run.stdout, describe(run)
    text = run.stdout.split("TEXT-BEGIN", 1)[1].split("TEXT-END", 1)[0]
    assert "Traceback of where the remote call failed" in text
    assert "helper_that_raises" in text  # the user's frames, remote side
    assert "explode" in text
    assert "ZeroDivisionError: exploded with 7" in text
    assert "AFTER 15" in run.stdout  # the actor survived
    assert "DONE" in run.stdout
    assert not wait_no_tagged(run.tag)


PROC_OUTPUT = """
import logging, sys
from regency.actor import Actor, endpoint, this_host

class Talker(Actor):
    @endpoint
    def say(self, text):
        print(f"stdout says {text}", flush=True)
        print(f"stderr says {text}", file=sys.stderr, flush=True)
        logging.getLogger("talker").warning("logging says %s", text)

procs = this_host().spawn_procs(per_host={"gpus": 2}, name="talkers")
talkers = procs.spawn("talk", Talker)
talkers.say.call("hello").get(timeout=20)
procs.stop().get(timeout=20)
print("CONTROLLER DONE", flush=True)
"""


def _lines_with(text: str, needle: str) -> list[str]:
    return [ln for ln in text.splitlines() if needle in ln]


def test_proc_output_reaches_the_controller_with_a_prefix(tmp_path, reap):
    run = run_script(tmp_path, PROC_OUTPUT)
    reap.append(run.tag)
    assert run.returncode == 0, describe(run)
    assert "CONTROLLER DONE" in run.stdout
    out = _lines_with(run.stdout, "stdout says hello")
    assert len(out) == 2, describe(run)
    err = _lines_with(run.stderr, "stderr says hello")
    assert len(err) == 2, describe(run)
    logs = _lines_with(run.stderr, "logging says hello")
    assert len(logs) == 2, describe(run)
    for group in (out, err, logs):
        for line in group:
            prefix = line.split("says", 1)[0]
            assert "talkers" in prefix, line
        ranks = sorted(re.findall(r"\d", ln.split("says", 1)[0])[-1] for ln in group)
        assert ranks == ["0", "1"], group
    # stdout output goes to stdout only, stderr output to stderr only
    assert not _lines_with(run.stderr, "stdout says")
    assert not _lines_with(run.stdout, "stderr says")


CLEAN_EXIT = """
import os
from regency.actor import Actor, endpoint, this_host, this_proc

class Worker(Actor):
    @endpoint
    def pid(self):
        return os.getpid()

procs = this_host().spawn_procs(per_host={"gpus": 3})
workers = procs.spawn("workers", Worker)
pids = list(workers.pid.call().get(timeout=20).values())
local = this_proc().spawn("local", Worker)
assert local.pid.call_one().get(timeout=20) == os.getpid()
print("PIDS", *pids, flush=True)
# no stop(), no shutdown: the program just ends
"""


def test_script_exiting_normally_leaves_no_processes(tmp_path, reap):
    run = run_script(tmp_path, CLEAN_EXIT)
    reap.append(run.tag)
    assert run.returncode == 0, describe(run)
    assert "PIDS" in run.stdout
    left = wait_no_tagged(run.tag)
    assert not left, f"left behind: {left}\n{describe(run)}"


def test_script_exiting_normally_is_quiet(tmp_path, reap):
    """A clean program prints nothing of regency's own on exit (no tracebacks, no asyncio
    'Task was destroyed' noise)."""
    run = run_script(tmp_path, CLEAN_EXIT)
    reap.append(run.tag)
    assert run.returncode == 0, describe(run)
    assert run.stderr.strip() == "", describe(run)


NESTED_EXIT = """
from regency.actor import Actor, endpoint, this_host

class Child(Actor):
    @endpoint
    def ping(self):
        return "pong"

class Parent(Actor):
    @endpoint
    def spawn(self):
        procs = this_host().spawn_procs(per_host={"kids": 2})
        self.kids = procs.spawn("kids", Child)
        return list(self.kids.ping.call().get(timeout=20).values())

procs = this_host().spawn_procs(per_host={"gpus": 1})
parent = procs.spawn("parent", Parent)
print("KIDS", parent.slice(gpus=0).spawn.call_one().get(timeout=20), flush=True)
"""


def test_script_with_nested_procs_leaves_no_processes(tmp_path, reap):
    run = run_script(tmp_path, NESTED_EXIT)
    reap.append(run.tag)
    assert run.returncode == 0, describe(run)
    assert "KIDS ['pong', 'pong']" in run.stdout, describe(run)
    left = wait_no_tagged(run.tag)
    assert not left, f"left behind: {left}\n{describe(run)}"


CLEANUP_AT_EXIT = """
import sys
from regency.actor import Actor, endpoint, this_host

class Tidy(Actor):
    def __init__(self, path):
        self.path = path

    @endpoint
    def ping(self):
        return "pong"

    def __cleanup__(self, exc):
        from regency.actor import context
        with open(f"{self.path}.{context().actor_instance.rank.rank}", "w") as f:
            f.write("cleaned")

procs = this_host().spawn_procs(per_host={"gpus": 2})
tidy = procs.spawn("tidy", Tidy, sys.argv[0] + ".marker")
print(list(tidy.ping.call().get(timeout=20).values()), flush=True)
# the program ends without stopping anything: the exit path stops the procs
"""


def test_cleanup_runs_when_the_program_ends(tmp_path, reap):
    run = run_script(tmp_path, CLEANUP_AT_EXIT)
    reap.append(run.tag)
    assert run.returncode == 0, describe(run)
    for rank in range(2):
        marker = tmp_path / f"script.py.marker.{rank}"
        assert marker.exists(), describe(run)
        assert marker.read_text() == "cleaned"
    assert not wait_no_tagged(run.tag)


OPEN_LINE = """
import sys, time
from regency.actor import Actor, endpoint, this_host
from regency._runtime import _output

_output.HOLD_S = 600.0  # the script ends its line itself, however slow the machine is

class Talker(Actor):
    @endpoint
    def say(self, text):
        print(text, flush=True)

procs = this_host().spawn_procs(per_host={"gpus": 1})
talker = procs.spawn("talker", Talker)
print("T0 begins", end="", flush=True)
talker.say.call_one("from the proc").get(timeout=20)
deadline = time.monotonic() + 20
while not sys.stdout.terminal.held and time.monotonic() < deadline:  # the proc line is held
    time.sleep(0.01)
held = bool(sys.stdout.terminal.held)
print(" and ends", flush=True)
print("HELD", held, flush=True)
procs.stop().get(timeout=20)
"""


def test_proc_output_never_lands_inside_a_line_the_script_is_writing(tmp_path, reap):
    run = run_script(tmp_path, OPEN_LINE)
    reap.append(run.tag)
    assert run.returncode == 0, describe(run)
    lines = run.stdout.splitlines()
    assert "HELD True" in lines, describe(run)
    assert "T0 begins and ends" in lines, describe(run)
    proc = [ln for ln in lines if ln.endswith("from the proc")]
    assert len(proc) == 1 and proc[0].startswith("[anon "), describe(run)
    assert lines.index(proc[0]) == lines.index("T0 begins and ends") + 1, describe(run)


def test_a_bad_environment_value_stops_the_first_call_naming_it(tmp_path, reap):
    """It went unnoticed until a proc ended, then broke the report of its end (which was
    lost) with tracebacks at exit, and the program exited 0."""
    run = run_script(tmp_path, CLEAN_EXIT, env={"REGENCY_TAIL_LOG_LINES": "abc"})
    reap.append(run.tag)
    assert run.returncode == 1 and "PIDS" not in run.stdout, describe(run)
    assert ("ConfigValueError: environment variable REGENCY_TAIL_LOG_LINES='abc'"
            in run.stderr), describe(run)
    assert "Exception in callback" not in run.stderr, describe(run)


def test_a_bad_environment_value_stops_a_worker_naming_it(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "REGENCY_SECRET": "bad-env", "REGENCY_SPAWN_TIMEOUT": "soon"}
    run = subprocess.run([sys.executable, "-m", "regency", "worker", "--listen",
                          "tcp://127.0.0.1:0"], env=env, text=True, capture_output=True,
                         timeout=60)
    assert run.returncode == 2, run.stderr
    assert "environment variable REGENCY_SPAWN_TIMEOUT='soon'" in run.stderr


ATTACH_NOTHING = """
import socket
from regency.actor import attach_to_workers

s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()  # nothing listens there now
try:
    attach_to_workers([f"tcp://127.0.0.1:{port}"])
except Exception as exc:
    print("ERROR", type(exc).__name__, exc)
"""


def test_attaching_to_nothing_says_where_to_look(tmp_path, reap):
    run = run_script(tmp_path, ATTACH_NOTHING,
                     env={"REGENCY_SECRET": "attach-nothing", "REGENCY_CONNECT_TIMEOUT": "1"})
    reap.append(run.tag)
    assert run.returncode == 0, describe(run)
    assert "ERROR TransportError cannot attach to worker tcp:127.0.0.1:" in run.stdout
    assert "is `regency worker --listen" in run.stdout, describe(run)


UNAWAITED_STOP = """
import os
from regency.actor import Actor, endpoint, this_host


class Tidy(Actor):
    @endpoint
    def ok(self) -> int:
        return 1

    def __cleanup__(self, exc):
        with open("cleaned", "w") as f:
            f.write(repr(exc))


procs = this_host().spawn_procs(per_host={"gpus": 1})
procs.spawn("tidy", Tidy).ok.call().get(timeout=30)
procs.stop()  # not waited for: the program ends at once
"""


def test_a_stop_not_waited_for_at_the_end_still_cleans_up(tmp_path, reap):
    run = run_script(tmp_path, UNAWAITED_STOP)
    reap.append(run.tag)
    assert run.returncode == 0, describe(run)
    assert (tmp_path / "cleaned").read_text() == "None", describe(run)
