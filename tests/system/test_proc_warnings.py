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
    def warn(self, configure: bool) -> None:
        if configure:
            logging.basicConfig(format="configured: %(message)s")
        logging.getLogger("regency.somewhere").warning("regency: something to know (%s)",
                                                       configure)
        logging.getLogger("regency.somewhere").info("regency: nothing to see")

procs = this_host().spawn_procs(per_host={"procs": 1})
talker = procs.spawn("talker", Talker)
talker.warn.call_one(False).get()
talker.warn.call_one(True).get()
logging.getLogger("regency.here").warning("regency: said in the controller")
procs.stop().get()
print("done")
"""


def test_a_procs_regency_warnings_reach_the_terminal_once(tmp_path) -> None:
    run = run_failing(tmp_path, SCRIPT, prelude=False, timeout=60)
    try:
        assert run.returncode == 0 and "done" in run.stdout, describe(run)
        lines = run.stderr.splitlines()
        plain = [ln for ln in lines if "something to know (False)" in ln]
        assert len(plain) == 1 and "configured:" not in plain[0], describe(run)
        configured = [ln for ln in lines if "something to know (True)" in ln]
        assert len(configured) == 1 and "configured: regency" in configured[0], describe(run)
        assert "nothing to see" not in run.stderr
        assert "said in the controller" not in run.stderr  # a library is quiet there
    finally:
        kill_tagged(run.tag)
