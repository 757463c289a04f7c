"""A ``get()`` that waits long on a live callee says so once, with the callee's stacks
(``_api/_hang_notice.py``), and goes on waiting: the call still answers.

The script's endpoint waits for a file the test creates once it has read the notice on
the script's stderr: every step waits on an event, none on a sleep."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

SCRIPT = """
import os, sys, time
from regency import config
from regency.actor import Actor, endpoint, this_host

class Stuck(Actor):
    @endpoint
    def wait_for_gate(self, gate):
        while not os.path.exists(gate):  # where the stacks will show it
            time.sleep(0.01)
        return "opened"

procs = this_host().spawn_procs(per_host={"gpus": 2})
stuck = procs.spawn("stuck", Stuck)
config.configure(hang_notice_after=1.0)  # once regency runs: it takes effect all the same
call = stuck.slice(gpus=1).wait_for_gate.call_one(sys.argv[1])
if sys.argv[2] == "await":  # a script of asyncio awaits it
    import asyncio

    async def main():
        return await call

    print("result", asyncio.run(main()), flush=True)
else:
    print("result", call.get(), flush=True)
procs.stop().get(timeout=30)
"""


@pytest.mark.parametrize("how", ["get", "await"])
def test_a_long_wait_tells_what_it_waits_for_and_where_the_callee_is(tmp_path: Path,
                                                                      how: str) -> None:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    gate = tmp_path / "gate"
    proc = subprocess.Popen([sys.executable, str(script), str(gate), how], cwd=tmp_path,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        notice = []
        for line in proc.stderr:  # bounded by the test's timeout
            notice.append(line)
            if "in wait_for_gate" in line:  # the callee's stack, with the notice first
                break
        gate.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(notice)
    assert "regency: the program has waited 1 s for stuck" in text, text + err
    assert ".wait_for_gate() on ranks [1], which has not answered" in text, text
    assert proc.returncode == 0 and "result opened" in out, out + err
    assert "has waited" not in err  # told once
