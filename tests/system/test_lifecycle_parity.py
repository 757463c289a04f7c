"""Lifecycle as in Monarch 0.7.0: finalizers and atexit handlers of procs, the controller's
atexit handlers on a fail-fast exit, and every line printed before ``stop()`` returns."""

from __future__ import annotations

from pathlib import Path

from _scripts import describe, run_script

ACTOR = '''
import atexit, sys
from regency.actor import Actor, current_rank, endpoint, this_host
import regency.actor as ra

class W(Actor):
    def __init__(self):
        self.r = r = current_rank().rank
        atexit.register(lambda: print(f"atexit-line {r}", flush=True))

    def __del__(self):
        print(f"del-line {self.r}", flush=True)

    def __cleanup__(self, exc):
        print(f"cleanup-line {self.r}", flush=True)

    @endpoint
    def talk(self, n):
        for i in range(n):
            print(f"talk {self.r} {i}")
        sys.stdout.write("an open line")
        return n

    @endpoint
    def boom(self):
        raise ValueError("nobody handles this")

atexit.register(lambda: print("controller-atexit", flush=True))
'''


def test_a_stopping_proc_runs_finalizers_and_atexit_and_all_its_lines_arrive(
        tmp_path: Path) -> None:
    run = run_script(tmp_path, ACTOR + '''
procs = this_host().spawn_procs(per_host={"g": 2})
procs.spawn("w", W).talk.call(300).get(timeout=30)
procs.stop().get(timeout=30)
print("STOPPED", flush=True)
''')
    assert run.returncode == 0, describe(run)
    before, _, after = run.stdout.partition("STOPPED")
    for r in (0, 1):
        assert f"talk {r} 299" in before, describe(run)
        for word in ("cleanup-line", "del-line", "atexit-line"):
            assert f"{word} {r}" in before, describe(run)
    assert "an open line" in before
    assert "talk" not in after and "controller-atexit" in after


def test_a_fail_fast_exit_runs_the_scripts_atexit_handlers(tmp_path: Path) -> None:
    run = run_script(tmp_path, ACTOR + '''
import threading
procs = this_host().spawn_procs(per_host={"g": 2})
w = procs.spawn("w", W)
w.talk.call(1).get(timeout=30)
w.slice(g=1).boom.broadcast()
threading.Event().wait(60)   # the failure ends the program
''')
    assert run.returncode == 1, describe(run)
    assert "controller-atexit" in run.stdout, describe(run)
    assert "and all its descendants have failed" in run.stderr, describe(run)
