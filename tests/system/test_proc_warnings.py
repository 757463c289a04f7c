"""regency's own warnings in a proc reach the controller's terminal (the ``regency`` logger is
quiet in the user's program, a library's manners, but a proc is regency's process), once
even where the actor configured logging itself."""

from __future__ import annotations

from _failure_scripts import describe, kill_tagged, run_failing

SCRIPT = """
import logging
from regency.actor import Actor, endpoint, this_host

class Talker(Actor):
    @endpoint
    def warn(self, setup: str) -> None:
        if setup == "root":
            logging.basicConfig(format="configured: %(message)s")
        elif setup == "own":  # a handler of the program's on regency's logger itself
            own = logging.StreamHandler()
            own.setFormatter(logging.Formatter("own: %(message)s"))
            logging.getLogger("regency").addHandler(own)
        logging.getLogger("regency.somewhere").warning("regency: something to know (%s)",
                                                       setup)
        logging.getLogger("regency.somewhere").info("regency: nothing to see")

procs = this_host().spawn_procs(per_host={"procs": 3})
talkers = procs.spawn("talker", Talker)
for rank, setup in enumerate(["none", "root", "own"]):
    talkers.slice(procs=rank).warn.call_one(setup).get()
logging.getLogger("regency.here").warning("regency: said in the controller")
procs.stop().get()
print("done")
"""


def test_a_procs_regency_warnings_reach_the_terminal_once(tmp_path) -> None:
    run = run_failing(tmp_path, SCRIPT, prelude=False, timeout=60)
    try:
        assert run.returncode == 0 and "done" in run.stdout, describe(run)
        lines = run.stderr.splitlines()
        said = {setup: [ln for ln in lines if f"something to know ({setup})" in ln]
                for setup in ("none", "root", "own")}
        assert len(said["none"]) == 1 and "configured:" not in said["none"][0], describe(run)
        assert len(said["root"]) == 1 and "configured: regency" in said["root"][0]
        # a handler of its own on the logger: that one writes it, ours does not as well
        assert len(said["own"]) == 1 and "own: regency" in said["own"][0], describe(run)
        assert "nothing to see" not in run.stderr
        assert "said in the controller" not in run.stderr  # a library is quiet there
    finally:
        kill_tagged(run.tag)
