"""What a ``this_host()`` proc prints shows before the result its caller prints
(``_output_fence``), and each line a proc's threads print arrives whole (``_whole_lines``).

Whole controller programs, their stdout and stderr merged into one pipe the way a terminal
shows them. Without the fence, most results overtook their lines (hundreds in 300 calls).
A worker host's procs are ordered by output marks (``_output_marks``, ADR 0039).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _scripts import loopback_worker

ACTORS = """
import sys
from regency.actor import Actor, endpoint, Port

class Sync(Actor):
    @endpoint
    def say(self, i: int) -> int:
        print(f"inside {i}")
        return i

    @endpoint(explicit_response_port=True)
    def answer(self, port: Port[int], i: int) -> None:
        print(f"port-inside {i}", file=sys.stderr)
        port.send(i)

class Async(Actor):
    @endpoint
    async def say(self, i: int) -> int:
        print(f"async-inside {i}", file=sys.stderr)
        return i

def drive(procs, n):
    sync, asyn = procs.spawn("sync", Sync), procs.spawn("async", Async)
    one = sync.slice(gpus=0)
    for i in range(n):
        print(f"result {one.say.call_one(i).get()}")
        print(f"async-result {asyn.slice(gpus=1).say.call_one(i).get()}")
        print(f"port-result {one.answer.call_one(i).get()}", file=sys.stderr)
    values = sync.say.call(n).get()
    print(f"gathered {sorted(values.values())}")
"""

LOCAL = ACTORS + """
from regency.actor import this_host
procs = this_host().spawn_procs(per_host={"gpus": 2})
drive(procs, int(sys.argv[1]))
procs.stop().get()
"""

REMOTE = ACTORS + """
from regency.actor import attach_to_workers
hosts = attach_to_workers([sys.argv[2]])
procs = hosts.spawn_procs(per_host={"gpus": 2})
drive(procs, int(sys.argv[1]))
hosts.shutdown()
"""

CALLS = 40


def run_merged(tmp_path: Path, source: str, *args: str, env: dict[str, str],
               code: int = 0) -> str:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    proc = subprocess.Popen([sys.executable, str(script), *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        raise AssertionError("the script timed out:\n" + out) from None
    assert proc.returncode == code, out
    return out


def run_where(tmp_path: Path, source: str, where: str, *args: str, code: int = 0) -> str:
    """``run_merged`` with the procs on ``this_host()``, or on a loopback worker (whose
    address the script gets as its last argument) that must exit 0 after a script that
    did (the worker outlives a failed one)."""
    env = {**os.environ, "REGENCY_SECRET": "output-order", "PYTHONUNBUFFERED": "1"}
    if where == "this_host":
        return run_merged(tmp_path, source, *args, env=env, code=code)
    with loopback_worker(env) as (worker, address):
        out = run_merged(tmp_path, source, *args, address, env=env, code=code)
        if code == 0:
            assert worker.wait(timeout=30) == 0
    return out


def out_of_order(out: str) -> list[str]:
    """Results shown before the line their endpoint printed (or with no such line)."""
    where: dict[tuple[str, int], int] = {}
    for k, line in enumerate(out.splitlines()):
        found = re.search(r"(async-|port-)?(inside|result) (\d+)$", line)
        if found:
            where[(f"{found.group(1) or ''}{found.group(2)}", int(found.group(3)))] = k
    wrong = []
    for (kind, i), k in where.items():
        if kind.endswith("result") and where.get((kind[:-6] + "inside", i), k + 1) > k:
            wrong.append(f"{kind} {i}")
    return wrong


def check(out: str) -> None:
    assert len([ln for ln in out.splitlines() if re.search(r"result \d+$", ln)]) == 3 * CALLS
    assert not out_of_order(out), out
    lines = out.splitlines()
    gathered = next(k for k, ln in enumerate(lines) if ln.startswith("gathered"))
    both = [k for k, ln in enumerate(lines) if ln.endswith(f"inside {CALLS}")]
    assert len(both) == 2 and max(both) < gathered, out  # every member's line first


def test_lines_of_this_hosts_procs_come_before_the_results(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    check(run_merged(tmp_path, LOCAL, str(CALLS), env=env))


def test_lines_of_a_workers_procs_come_before_the_results(tmp_path: Path) -> None:
    """Before output marks (ADR 0039), 120 of 120 results overtook their lines."""
    check(run_where(tmp_path, REMOTE, "worker", str(CALLS)))


NESTED = """
import sys
from regency.actor import Actor, attach_to_workers, endpoint, this_host

class Inner(Actor):
    @endpoint
    def say(self, i: int) -> int:
        print(f"inside {i}")
        return i

class Outer(Actor):
    def __init__(self, inner):
        self.inner = inner

    @endpoint
    def ask(self, i: int) -> int:
        return self.inner.say.call_one(i).get()  # the line is printed by another proc

mixed = sys.argv[2] == "mixed"  # the outer actor on this host, the inner on the worker
hosts = attach_to_workers([sys.argv[3]]) if sys.argv[3:] else this_host()
procs = hosts.spawn_procs(per_host={"gpus": 2})
inner = procs.slice(gpus=1).spawn("inner", Inner)
here = this_host().spawn_procs(per_host={"gpus": 1}) if mixed else procs.slice(gpus=0)
outer = here.spawn("outer", Outer, inner)
for i in range(int(sys.argv[1])):
    print(f"result {outer.ask.call_one(i).get()}")
procs.stop().get()
if sys.argv[3:]:
    hosts.shutdown()
"""


@pytest.mark.parametrize(("where", "mode"), [("this_host", "same"), ("worker", "same"),
                                             ("worker", "mixed")])
def test_lines_of_a_nested_call_come_before_the_result_it_led_to(tmp_path: Path, where: str,
                                                                mode: str) -> None:
    """On a worker, the inner proc's mark goes to the outer proc, which passes it on to
    the controller, also from a ``this_host()`` proc (40 of 40 results overtook their line
    before)."""
    out = run_where(tmp_path, NESTED, where, str(CALLS), mode)
    assert len([ln for ln in out.splitlines() if re.search(r"inside \d+$", ln)]) == CALLS
    assert not out_of_order(out), out


SWAPPED = """
import sys
from regency.actor import Actor, attach_to_workers, endpoint, this_host

class Sink:  # a user's stdout: write() only, or a flush() that raises
    def __init__(self, raising):
        self.raising = raising

    def write(self, text):
        return len(text)

    def __getattr__(self, name):
        if name == "flush" and self.raising:
            return lambda: 1 / 0
        raise AttributeError(name)

class Swapper(Actor):
    @endpoint
    def swap(self, raising: bool) -> str:
        print("inside 1")
        sys.stdout = Sink(raising)
        print("swallowed")
        return "swapped"

    @endpoint
    def still(self) -> str:
        return "here"

hosts = attach_to_workers([sys.argv[1]]) if sys.argv[1:] else this_host()
procs = hosts.spawn_procs(per_host={"gpus": 2})
for g, raising in ((0, False), (1, True)):
    swapper = procs.slice(gpus=g).spawn(f"swapper{g}", Swapper)
    print("result", swapper.swap.call_one(raising).get(timeout=60),
          swapper.still.call_one().get(timeout=60))
procs.stop().get()
if sys.argv[1:]:
    hosts.shutdown()
"""


@pytest.mark.parametrize("where", ["this_host", "worker"])
def test_a_users_stdout_without_a_working_flush_loses_no_reply(tmp_path: Path,
                                                               where: str) -> None:
    """The reply's flush of the proc's streams raised ``AttributeError`` from the send:
    the reply was lost and the actor's thread died (a review found it)."""
    out = run_where(tmp_path, SWAPPED, where)
    assert out.count("result swapped here") == 2, out


NOISY = ACTORS.replace("class Async(Actor):", """
import os, threading, time

def noise():  # a subprocess or C code writing to fd 1 behind sys.stdout's back
    while True:
        os.write(1, b"noise " * 15 + b"\\n")
        time.sleep(0.0002)  # a steady stream, not a flood

class Async(Actor):
    def __init__(self):
        threading.Thread(target=noise, daemon=True).start()
""") + """
from regency.actor import this_host
procs = this_host().spawn_procs(per_host={"gpus": 2})
drive(procs, int(sys.argv[1]))
procs.stop().get()
"""


def test_a_pipe_another_writer_keeps_full_still_orders_the_lines(tmp_path: Path) -> None:
    """The unread count of the pipe never drops to zero; one read of the agent is enough."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out = run_merged(tmp_path, NOISY, str(CALLS), env=env)
    # unbuffered (PYTHONUNBUFFERED), print's "inside 3" and "\n" are two writes: a noise
    # line may land between them, and the rest of the line comes as a line of its own
    kept = [re.sub(r"(noise )+$", "", ln) for ln in out.splitlines()
            if not re.fullmatch(r"\[[^\]]*\] (noise )*", ln)]
    check("\n".join(kept))


ENDINGS = """
import os, sys
import regency.actor as ra
from regency.actor import Actor, attach_to_workers, endpoint

class P(Actor):
    @endpoint
    def step(self, i: int) -> int:
        print(f"inside {i}")
        return i

    @endpoint
    def end(self, how: str) -> None:
        if how == "exit":
            os._exit(3)  # a crash: nothing of this proc runs any more
        raise SystemExit(3)  # the actor fails: a supervision event follows the answer

ra.unhandled_fault_hook = lambda failure: None
hosts = attach_to_workers([sys.argv[1]]) if sys.argv[1:] else ra.this_host()
for k, how in enumerate(["exit", "raise"] * 3):
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    m = procs.spawn("p", P)
    m.step.call_one(-1).get(timeout=30)
    answered = m.step.call_one(k)  # printed and answered just before the proc's end
    ended = m.end.call_one(how)
    print(f"answer {answered.get(timeout=30)}")
    try:
        ended.get(timeout=30)
    except Exception as exc:
        print(f"ended {type(exc).__name__}")
    try:
        procs.stop().get(timeout=30)
    except Exception:
        pass
if sys.argv[1:]:
    hosts.shutdown()
"""


@pytest.mark.parametrize("where", ["this_host", "worker"])
def test_an_answer_given_just_before_a_proc_ends_is_delivered(tmp_path: Path,
                                                              where: str) -> None:
    """A printing call answered, then the proc crashes or the actor fails at once: the
    answer is neither lost nor overtaken by the failure (a first design held answers in
    the proc and lost them)."""
    out = run_where(tmp_path, ENDINGS, where)
    assert [ln for ln in out.splitlines() if ln.startswith("answer")] \
        == [f"answer {k}" for k in range(6)], out
    assert out.count("ended SupervisionError") == 6, out


@pytest.mark.parametrize("setting", ["REGENCY_ORDER_OUTPUT", "REGENCY_ENABLE_LOG_FORWARDING"])
def test_ordering_can_be_turned_off_and_nothing_is_lost(tmp_path: Path, setting: str) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", setting: "0"}
    out = run_merged(tmp_path, LOCAL, str(CALLS), env=env)
    assert len([ln for ln in out.splitlines() if re.search(r"result \d+$", ln)]) == 3 * CALLS
    if setting == "REGENCY_ORDER_OUTPUT":  # the lines are all there, in whatever order
        assert len([ln for ln in out.splitlines() if re.search(r"inside \d+$", ln)]) \
            == 3 * CALLS + 2



TALKERS = """
import sys
from regency.actor import Actor, attach_to_workers, endpoint, this_host

class Talker(Actor):
    @endpoint
    def talk(self, who: str, n: int) -> int:
        sys.setswitchinterval(1e-6)  # threads take turns as often as the interpreter can
        for i in range(n):
            print(who, "says", i)  # four writes: the words, the spaces, the newline
        return n

hosts = attach_to_workers([sys.argv[1]]) if sys.argv[1:] else this_host()
procs = hosts.spawn_procs(per_host={"gpus": 1})
a, b = procs.spawn("a", Talker), procs.spawn("b", Talker)  # one proc, a thread each
said = [a.talk.call_one("alpha", 400), b.talk.call_one("beta", 400)]
print("said", [f.get(timeout=60) for f in said])
procs.stop().get(timeout=30)
if sys.argv[1:]:
    hosts.shutdown()
"""


@pytest.mark.parametrize("where", ["this_host", "worker"])
def test_two_actors_of_one_proc_printing_at_once_keep_their_lines_whole(
        tmp_path: Path, where: str) -> None:
    """Without ``WholeLines`` about one line in eight was torn (``alphabeta says 0``)."""
    out = run_where(tmp_path, TALKERS, where)
    said = [ln for ln in out.splitlines() if " says " in ln]
    torn = [ln for ln in said if not re.fullmatch(r"\[.*\] (alpha|beta) says \d+", ln)]
    assert len(said) == 800 and not torn, out


LAST_WORDS = """
import os
import sys
import tempfile
import time
from regency.actor import Actor, attach_to_workers, endpoint, this_host

class Quitter(Actor):
    @endpoint
    def quit(self, words: str, fill: int = 0, started: str = "") -> None:
        if started:  # the script may end now: this call runs, its failure comes
            open(started, "w").close()
        for i in range(fill):
            print(f"fill {i}")
        print(words)
        raise SystemExit(3)  # the actor fails; its failure goes up as a system message

    @endpoint
    def ok(self) -> None:
        pass

    @endpoint
    def say(self, words: str) -> None:
        print(words)

ends = sys.argv[1] == "ends"
hosts = attach_to_workers([sys.argv[2]]) if sys.argv[2:] else this_host()
procs = hosts.spawn_procs(per_host={"gpus": 1})
quitter = procs.spawn("quitter", Quitter)
started = ""
if ends:  # the script ends with the call: its failure comes while the controller stops
    quitter.ok.call_one().get(timeout=60)
    started = tempfile.mktemp(prefix="regency-quit-")
# no reply: only the failure, just after its lines
quitter.quit.broadcast("last words", 300, started)
if ends:  # not before the call runs (a stop drops calls not yet begun)
    waited = time.monotonic()
    while not os.path.exists(started) and time.monotonic() - waited < 60:
        time.sleep(0.01)
    if os.path.exists(started):
        os.unlink(started)
if not ends:  # another actor of the proc prints meanwhile; fail fast ends the wait
    procs.spawn("other", Quitter).say.broadcast("other words")
    time.sleep(60)
"""


@pytest.mark.parametrize("where", ["this_host", "worker"])
@pytest.mark.parametrize("when", ["waits", "ends"])
def test_an_actors_last_lines_come_before_the_report_of_its_failure(tmp_path: Path,
                                                                    where: str,
                                                                    when: str) -> None:
    """Another actor of the proc prints at the same moment (its line tore this one once).
    A worker's report came before the 300 lines, and without them (ADR 0039); one that
    came as the controller stopped, before them too."""
    out = run_where(tmp_path, LAST_WORDS, where, when, code=1)
    lines = out.splitlines()
    last = [k for k, ln in enumerate(lines) if re.fullmatch(r"\[.*\] last words", ln)]
    report = [k for k, ln in enumerate(lines) if "SystemExit" in ln]
    assert len(last) == 1 and report and last[0] < report[0], out
    fills = [k for k, ln in enumerate(lines) if re.fullmatch(r"\[.*\] fill \d+", ln)]
    assert len(fills) == 300 and max(fills) < report[0], out
    shown = lines.index("  last 20 lines printed by the proc:")  # the other's line too
    assert {"    | fill 299", "    | last words"} <= set(lines[shown + 1:shown + 21]), out


UNFINISHED = """
import sys
from regency.actor import Actor, attach_to_workers, endpoint, this_host

class Half(Actor):
    @endpoint
    def say(self) -> None:
        print("without its end", end="")  # held by its thread until the proc ends

hosts = attach_to_workers([sys.argv[1]]) if sys.argv[1:] else this_host()
procs = hosts.spawn_procs(per_host={"gpus": 1})
procs.spawn("half", Half).say.call_one().get(timeout=60)
procs.stop().get(timeout=60)
print("stopped")
if sys.argv[1:]:
    hosts.shutdown()
"""


@pytest.mark.parametrize("where", ["this_host", "worker"])
def test_a_line_left_unfinished_shows_when_its_proc_stops(tmp_path: Path, where: str) -> None:
    out = run_where(tmp_path, UNFINISHED, where)
    lines = out.splitlines()
    assert lines.index("stopped") > next(
        k for k, ln in enumerate(lines) if ln.endswith("] without its end")), out
