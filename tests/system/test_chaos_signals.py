"""The chaos tier, signals (issue 19): SIGTERM of a controller, a proc and a worker (what
SLURM and Kubernetes send), and a proc or worker frozen with SIGSTOP, then resumed.

Each case is bounded in time; waits are on lines the processes print (or on their exit),
never on sleeps. Figures are printed (``-s`` shows them) and recorded in
docs/hardening.md. Processes are counted with psutil: nothing may be left behind.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from _chaos import Script, Worker
from _signal_scripts import (
    CONTROLLER_TERM,
    PROC_FROZEN,
    PROC_TERM,
    USER_HANDLER,
    WORKER_FROZEN,
    WORKER_TERM,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def scripts() -> Iterator[list[Script]]:
    started: list[Script] = []
    yield started
    for s in started:
        s.kill()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        if w.proc.poll() is None:
            os.kill(w.proc.pid, signal.SIGCONT)
        w.stop()


def _tree(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def _none_left(procs: list[psutil.Process], timeout: float = 30) -> None:
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    assert not alive, f"left running: {[p.pid for p in alive]}"


def _cleanups(out: Path) -> set[int]:
    return {int(p.name.split("-")[1]) for p in out.glob("cleanup-*")}


def _frozen(pid: int) -> None:
    """Wait until the kernel reports ``pid`` stopped."""
    deadline = time.monotonic() + 30
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        assert time.monotonic() < deadline, "the process did not stop"
        time.sleep(0.01)


# -- SIGTERM -----------------------------------------------------------------------------------
def test_sigterm_of_the_controller_runs_finally_atexit_and_cleanup(
        tmp_path: Path, scripts: list[Script]) -> None:
    s = Script(CONTROLLER_TERM, str(tmp_path))
    scripts.append(s)
    ready = s.next()
    tree = _tree(s.proc.pid)  # the fork server and the procs
    assert len(tree) >= 3
    t0 = time.monotonic()
    os.kill(s.proc.pid, signal.SIGTERM)
    err = s.finish(timeout=60)  # sigterm_grace (20 s) bounds it well before
    exit_s = time.monotonic() - t0
    assert s.proc.returncode == 143, err
    assert "terminated (SIGTERM)" in err
    assert (tmp_path / "finally").exists() and (tmp_path / "atexit").exists()
    assert _cleanups(tmp_path) == set(ready["pids"])
    _none_left(tree)
    print(f"\ncontroller SIGTERM: exit 143 in {exit_s * 1000:.0f} ms; finally, atexit and "
          f"{len(ready['pids'])} __cleanup__ ran; {len(tree)} processes, none left")


def test_a_sigterm_handler_of_the_program_is_left_alone(scripts: list[Script]) -> None:
    s = Script(USER_HANDLER, "-")
    scripts.append(s)
    assert s.proc.stdout is not None
    assert s.proc.stdout.readline().strip() == "ready True"
    tree = _tree(s.proc.pid)
    os.kill(s.proc.pid, signal.SIGTERM)
    s.finish()
    assert s.proc.returncode == 7
    _none_left(tree)


def test_sigterm_of_a_proc_runs_its_cleanup_and_supervision_names_it(
        tmp_path: Path, scripts: list[Script]) -> None:
    s = Script(PROC_TERM, str(tmp_path))
    scripts.append(s)
    out = s.next()
    err = s.finish()
    assert s.proc.returncode == 0, err
    assert out["victim"] in _cleanups(tmp_path)
    assert "SIGTERM" in out["outcome"], out
    assert "killed by signal SIGTERM" in out["report"], out
    print(f"\nproc SIGTERM: __cleanup__ ran; supervision reported it "
          f"{out['detect_s'] * 1000:.0f} ms after the signal; the call: {out['outcome'][:80]}")


@pytest.mark.parametrize(("sig", "code", "said"), [
    (signal.SIGTERM, 0, "received SIGTERM"), (signal.SIGINT, 130, "received Ctrl-C (SIGINT)")])
def test_sigterm_of_a_worker_stops_its_procs_and_leaves_nothing(
        tmp_path: Path, scripts: list[Script], workers: list[Worker], sig: int, code: int,
        said: str) -> None:
    """SIGTERM, or Ctrl-C in the worker's terminal: the same orderly stop."""
    w = Worker()
    workers.append(w)
    s = Script(WORKER_TERM, str(tmp_path), w.address)
    scripts.append(s)
    ready = s.next()
    tree = _tree(w.proc.pid)
    sent = time.time()
    os.kill(w.proc.pid, sig)
    assert w.proc.wait(60) == code
    stopped_s = time.time() - sent
    _none_left(tree)
    assert _cleanups(tmp_path) == set(ready["pids"])
    assert w.count(said) == 1 and w.count("Traceback") == 0
    failed = s.next()
    assert signal.Signals(sig).name in failed["report"], failed
    s.finish()
    print(f"\nworker {signal.Signals(sig).name}: exit {code} in {stopped_s * 1000:.0f} ms, "
          f"{len(ready['pids'])} "
          f"__cleanup__ ran, {len(tree)} processes, none left; controller told "
          f"{(failed['at'] - sent) * 1000:.0f} ms after the signal")


# -- SIGSTOP, SIGCONT --------------------------------------------------------------------------
def test_a_frozen_proc_holds_its_calls_and_answers_them_when_resumed(
        tmp_path: Path, scripts: list[Script]) -> None:
    """A stopped proc is indistinguishable from a busy one: its calls wait (bounded by the
    caller's timeout), the other members answer, and after SIGCONT it answers them all."""
    s = Script(PROC_FROZEN, str(tmp_path))
    scripts.append(s)
    victim = s.next()["victim"]
    os.kill(victim, signal.SIGSTOP)
    _frozen(victim)
    s.go_on()
    frozen = s.next()
    assert frozen["outcome"] == "TimeoutError" and frozen["others"] == "other", frozen
    rss = psutil.Process(victim).memory_info().rss
    os.kill(victim, signal.SIGCONT)
    s.go_on()
    resumed = s.next()
    assert resumed["late"] == "during" and resumed["after"] == ["after", "after"], resumed
    assert resumed["failures"] == 0
    s.finish()
    assert s.proc.returncode == 0
    print(f"\nfrozen proc: call in flight answered {resumed['resumed_s'] * 1000:.0f} ms after "
          f"SIGCONT; the other rank answered while it was frozen; RSS {rss >> 20} MiB")


def test_a_frozen_worker_is_declared_lost_and_serves_again_when_resumed(
        tmp_path: Path, scripts: list[Script], workers: list[Worker]) -> None:
    """Frozen past ``host_lost_timeout``: the controller fails its procs, naming the host.
    Resumed: the worker drops that controller's procs and a new controller gets in; the
    first controller's ``hosts.shutdown()`` still makes it exit."""
    from _chaos import run_controller

    w = Worker()
    workers.append(w)
    s = Script(WORKER_FROZEN, str(tmp_path), w.address)
    scripts.append(s)
    ready = s.next()
    tree = _tree(w.proc.pid)
    start = len(w.lines)
    os.kill(w.proc.pid, signal.SIGSTOP)
    _frozen(w.proc.pid)
    s.go_on()
    lost = s.next()
    assert "stopped answering" in lost["report"], lost
    os.kill(w.proc.pid, signal.SIGCONT)
    w.wait_for(lambda ln: "ready for the next" in ln, 30, start)
    _none_left([p for p in tree if p.pid in ready["pids"]])
    rss = w.rss_kib()
    report = run_controller(w)  # a new controller attaches and calls
    assert report["ok"], report
    s.go_on()
    done = s.next()
    assert done["outcome"] == "ok", done
    assert w.proc.wait(30) == 0  # the first controller's shutdown still reached it
    _none_left(tree)
    s.finish()
    print(f"\nfrozen worker: lost after {lost['detect_s']:.2f} s; resumed: procs dropped, "
          f"RSS {rss >> 10} MiB, a new controller attached in {report['attach_s']:.2f} s; "
          f"shutdown {done['shutdown_s']:.2f} s")


def test_shutdown_of_a_worker_still_frozen_is_bounded_and_kills_it(
        tmp_path: Path, scripts: list[Script], workers: list[Worker]) -> None:
    """``hosts.shutdown()`` of a worker that stays stopped (declared lost): one on this
    machine is SIGKILLed at once, saying so, and its procs die with it."""
    w = Worker()
    workers.append(w)
    s = Script(WORKER_FROZEN, str(tmp_path), w.address)
    scripts.append(s)
    s.next()
    tree = _tree(w.proc.pid)
    os.kill(w.proc.pid, signal.SIGSTOP)
    _frozen(w.proc.pid)
    s.go_on()
    s.next()
    s.go_on()  # shutdown while it is still stopped
    done = s.next()
    err = s.finish()
    assert done["outcome"] == "ok", done
    assert w.proc.wait(30) == -signal.SIGKILL
    assert "SIGKILL" in err, err
    _none_left(tree)
    print(f"\nworker still frozen: shutdown returned in {done['shutdown_s']:.2f} s, "
          f"the worker SIGKILLed")
