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


AWAITS = """
import asyncio, os, sys
from regency import config
from regency.actor import Actor, endpoint, this_host

class Gated(Actor):
    @endpoint
    async def wait_for(self, gate, tag):
        while not os.path.exists(gate):
            await asyncio.sleep(0.01)
        return tag

async def main(where):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    first = procs.slice(gpus=0).spawn("first", Gated)
    later = procs.slice(gpus=1).spawn("later", Gated)
    config.configure(hang_notice_after=1.0)
    calls = [first.wait_for.call_one(os.path.join(where, "a"), f"a{i}") for i in range(3)]
    together = asyncio.ensure_future(asyncio.gather(*calls))  # one wait: one notice
    while not os.path.exists(os.path.join(where, "go")):  # the test saw that notice
        await asyncio.sleep(0.01)
    print("b", await later.wait_for.call_one(os.path.join(where, "b"), "b"), flush=True)
    print("a", await together, flush=True)
    await procs.stop()

asyncio.run(main(sys.argv[1]))
"""


def test_awaits_of_one_gather_get_one_notice_and_a_later_await_its_own(
        tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(AWAITS))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], cwd=tmp_path,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    notices = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # bounded by the test's timeout
            if line.startswith("regency: the program has waited"):
                notices.append(line)
                if len(notices) == 1:
                    (tmp_path / "go").touch()  # now the later await begins
                else:
                    break
        (tmp_path / "a").touch()
        (tmp_path / "b").touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "first-" in notices[0] and ".wait_for() on ranks [0]" in notices[0], notices
    assert "later-" in notices[1], notices  # not hidden behind the first, still pending
    assert proc.returncode == 0 and "b b" in out and "a ['a0', 'a1', 'a2']" in out, out + err
    assert "has waited" not in err  # the gather's other calls were not told one by one

