"""``breakpoint()`` in actors and the ``regency debug`` console, driven as a person would:
through a pseudo-terminal (pexpect), a controller script in one and the console in another.

Each test points ``XDG_RUNTIME_DIR`` at its own directory, so the console finds exactly the
controller the test started.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")

pytestmark = pytest.mark.timeout(120)
WAIT = 60  # seconds any one expected line may take on a loaded machine
DBG = "regency_dbg> "
PDB = r"\(Pdb\) "


class Terminals:
    """The controller and the consoles a test started (all ended when it ends)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1",
                    "HOME": str(tmp_path)}
        self.env.pop("REGENCY_SECRET", None)
        self.env.pop("REGENCY_SECRET_FILE", None)
        self.children: list[pexpect.spawn] = []

    def controller(self, source: str) -> pexpect.spawn:
        script = self.tmp / "script.py"
        script.write_text(textwrap.dedent(source))
        return self._spawn([str(script)])

    def console(self, *args: str, env: dict[str, str] | None = None) -> pexpect.spawn:
        return self._spawn(["-m", "regency", "debug", *args], env)

    def _spawn(self, args: list[str], env: dict[str, str] | None = None) -> pexpect.spawn:
        child = pexpect.spawn(sys.executable, args, cwd=str(self.tmp), encoding="utf-8",
                              env={**self.env, **(env or {})}, timeout=WAIT,
                              dimensions=(50, 200))
        child.logfile_read = open(self.tmp / f"pty-{len(self.children)}.log", "w")  # noqa: SIM115
        self.children.append(child)
        return child

    def close(self) -> None:
        for child in self.children:
            if child.isalive():
                child.terminate(force=True)
            # Its last words reach its log (it may have read its end already: ValueError).
            with contextlib.suppress(pexpect.ExceptionPexpect, ValueError, OSError):
                child.expect(pexpect.EOF, timeout=5)
            child.logfile_read.close()


@pytest.fixture
def terms(tmp_path: Path) -> Iterator[Terminals]:
    t = Terminals(tmp_path)
    yield t
    t.close()


FOUR_RANKS = """
    from regency.actor import Actor, endpoint, this_host, current_rank

    class Worker(Actor):
        @endpoint
        def work(self, x: int) -> int:
            r = current_rank().rank
            local = x * 10 + r
            if r in (1, 3):
                breakpoint()
            return local + 1

    if __name__ == "__main__":
        procs = this_host().spawn_procs(per_host={"procs": 4})
        w = procs.spawn("Worker", Worker)
        print("results", [v for _, v in w.work.call(5).get()])
        procs.stop().get()
        print("script done")
"""


def test_a_person_debugs_two_of_four_ranks(terms: Terminals) -> None:
    ctl = terms.controller(FOUR_RANKS)
    ctl.expect(r"is paused in pdb \(__main__\.Worker\.work\); attach with `regency debug` in "
               "another terminal")  # the endpoint in flight is named
    con = terms.console()
    con.expect(DBG)
    _wait_paused(con, 2)
    con.sendline("list")
    con.expect(DBG)
    assert re.search(r"Worker +1 +procs=1 .*Worker\.work +11", con.before), con.before
    assert re.search(r"Worker +3 +procs=3 .*Worker\.work +11", con.before), con.before
    con.sendline("attach Worker 1")
    con.expect("script.py")  # the source of code pickled from __main__ is found
    con.expect("return local \\+ 1")
    con.expect(PDB)
    con.sendline("p local")
    con.expect("51")
    con.expect(PDB)
    con.sendline("l")
    con.expect("breakpoint\\(\\)")
    con.expect(PDB)
    con.sendline("detach")
    con.expect("it stays paused")
    con.expect(DBG)
    con.sendline("quit")
    con.expect("2 ranks stay paused")
    con.expect(pexpect.EOF)

    con = terms.console()  # a later console sees the same sessions
    con.expect("2 paused ranks")
    con.expect(DBG)
    con.sendline("attach Worker 1")
    con.expect("<last pdb output of Worker rank 1 follows>")
    con.expect("\\(Pdb\\) ")
    con.sendline("detach")
    con.expect(DBG)
    con.sendline("cast Worker ranks(1,3) p local * 2")
    con.expect(r"\[Worker 1\] 102")
    con.expect(r"\[Worker 3\] 106")
    con.expect(DBG)
    con.sendline("continue")
    con.expect("continuing 2 paused ranks")
    ctl.expect(r"results \[51, 52, 53, 54\]")
    ctl.expect("script done")
    ctl.expect(pexpect.EOF)
    ctl.close()
    assert ctl.exitstatus == 0
    con.expect("the controller has gone")
    con.expect(pexpect.EOF)


def test_bad_commands_and_ranks_say_what_exists(terms: Terminals) -> None:
    ctl = terms.controller(FOUR_RANKS)
    ctl.expect("regency debug")
    con = terms.console()
    con.expect(DBG)
    _wait_paused(con, 2)
    con.sendline("frobnicate")
    con.expect("unknown command 'frobnicate'; commands: list, attach, cast, continue")
    con.expect(DBG)
    con.sendline("attach Worker 2")
    con.expect("no paused rank 2 of 'Worker'; paused: Worker ranks 1, 3")
    con.expect(DBG)
    con.sendline("attach Nobody 1")
    con.expect("no actor 'Nobody' has a paused rank; paused: Worker ranks 1, 3")
    con.expect(DBG)
    con.sendline("cast Worker ranks(0) p 1")
    con.expect("no paused rank of 'Worker' matches; paused: Worker ranks 1, 3")
    con.expect(DBG)
    con.sendline("cast Worker ranks(procs=1:4:2) p r")
    con.expect(r"\[Worker 1\] 1")
    con.expect(r"\[Worker 3\] 3")
    con.expect(DBG)
    con.send("att\t")  # readline completes commands, then actor names
    con.expect("attach ")
    con.send("Wor\t")
    con.expect("Worker ")
    con.sendline("1")
    con.expect(PDB)
    con.sendline("detach")
    con.expect(DBG)
    con.sendline("c")
    ctl.expect("script done")
    ctl.expect(pexpect.EOF)
    con.expect(pexpect.EOF)  # the console saves its history on the way out
    history = (terms.tmp / ".regency_debug_history").read_text()
    assert "frobnicate" in history and "attach Worker 1" in history


def test_a_console_with_the_wrong_secret_is_refused(terms: Terminals) -> None:
    ctl = terms.controller(FOUR_RANKS)
    ctl.expect("regency debug")
    address = _address(terms.tmp)
    con = terms.console("--connect", address, env={"REGENCY_SECRET": "not the secret"})
    con.expect("refused the connection: authentication failed")
    con.expect(pexpect.EOF)
    con.close()
    assert con.exitstatus == 3
    right = terms.console("--connect", address)  # the key from the controller's file
    right.expect(DBG)
    _wait_paused(right, 2)
    right.sendline("continue")
    ctl.expect("script done")


def test_no_controller_says_so(terms: Terminals) -> None:
    con = terms.console()
    con.expect("no regency controller is running on this machine")
    con.expect(pexpect.EOF)


ASYNC_POST_MORTEM = """
    import pdb
    from regency.actor import Actor, endpoint, this_host, current_rank

    class Async(Actor):
        @endpoint
        async def run(self) -> int:
            secret = 41 + current_rank().rank
            pdb.set_trace()
            return 1 // (secret - 41)

    if __name__ == "__main__":
        procs = this_host().spawn_procs(per_host={"procs": 2})
        a = procs.spawn("Async", Async)
        try:
            a.run.call().get()
        except Exception as exc:
            print("caller got", type(exc).__name__, "ZeroDivisionError" in str(exc))
            print(exc)  # in pty-0.log when the test fails
        procs.stop().get()
        print("script done")
"""


def test_async_endpoint_set_trace_then_post_mortem(terms: Terminals) -> None:
    ctl = terms.controller(ASYNC_POST_MORTEM)
    ctl.expect("regency debug")
    con = terms.console()
    con.expect(DBG)
    _wait_paused(con, 2)
    con.sendline("attach Async 0")
    con.expect(PDB)
    con.sendline("p secret")
    con.expect("41")
    con.expect(PDB)
    con.sendline("c")  # rank 0 divides by zero: it pauses again, post-mortem
    con.expect("runs on")
    con.expect(DBG)
    con.sendline("list")
    con.expect(r"Async +0 .*\[post-mortem\]")
    con.expect(DBG)
    con.sendline("attach Async 0")
    con.expect("ZeroDivisionError")
    con.expect(PDB)
    con.sendline("p secret - 41")
    con.expect("0")
    con.expect(PDB)
    con.sendline("detach")
    con.expect(DBG)
    con.sendline("continue")
    ctl.expect("caller got ActorError True")
    ctl.expect("script done")
    ctl.expect(pexpect.EOF)


POST_MORTEM_CONFIG = """
    from regency import config
    from regency.actor import Actor, endpoint, this_host

    class Failing(Actor):
        @endpoint
        def boom(self) -> None:
            doomed = "yes"
            raise KeyError(doomed)

    if __name__ == "__main__":
        config.configure(debug_post_mortem=True)
        procs = this_host().spawn_procs(per_host={"procs": 1})
        f = procs.spawn("Failing", Failing)
        try:
            f.boom.call_one().get()
        except Exception as exc:
            print("caller got", type(exc).__name__)
        procs.stop().get()
        print("script done")
"""


def test_the_config_key_pauses_on_any_uncaught_endpoint_exception(terms: Terminals) -> None:
    ctl = terms.controller(POST_MORTEM_CONFIG)
    ctl.expect("post-mortem in pdb")
    con = terms.console()
    con.expect(DBG)
    con.sendline("attach Failing 0")
    con.expect("post-mortem: KeyError")
    con.expect(PDB)
    con.sendline("p doomed")
    con.expect("'yes'")
    con.expect(PDB)
    con.sendline("c")
    ctl.expect("caller got ActorError")
    ctl.expect("script done")


def test_a_debugged_proc_that_dies_ends_its_session_in_the_console(terms: Terminals) -> None:
    ctl = terms.controller(FOUR_RANKS)
    ctl.expect("regency debug")
    con = terms.console()
    con.expect(DBG)
    _wait_paused(con, 2)
    con.sendline("attach Worker 3")
    con.expect(PDB)
    con.sendline("import os; os._exit(7)")
    con.expect("Worker rank 3 runs on \\(its proc is gone: the session ended\\)")
    con.expect(DBG)
    con.sendline("list")
    con.expect(r"Worker +1 ")
    con.expect(DBG)
    con.sendline("continue")
    ctl.expect("exited with code 7")  # the controller's own report of the death
    ctl.expect(pexpect.EOF)


def _wait_paused(con: pexpect.spawn, count: int) -> None:
    """Ask ``list`` until ``count`` ranks are paused (they pause in their own time)."""
    for _ in range(200):
        con.sendline("list")
        con.expect(DBG)
        table = con.before
        if sum(" Worker." in row or " Async." in row for row in table.splitlines()) >= count:
            return
        con.expect(pexpect.TIMEOUT, timeout=0.1)
    raise AssertionError(f"fewer than {count} ranks paused: {con.before}")


def _address(runtime_dir: Path) -> str:
    import json

    files = list((runtime_dir / "regency").glob("controller-*.json"))
    assert len(files) == 1, files
    assert (files[0].stat().st_mode & 0o777) == 0o600
    return str(json.loads(files[0].read_text())["address"])


def test_regency_stack_shows_where_every_proc_is(terms: Terminals) -> None:
    ctl = terms.controller(FOUR_RANKS)
    ctl.expect("regency debug")
    con = terms.console()
    con.expect(DBG)
    _wait_paused(con, 2)
    dump = terms._spawn(["-m", "regency", "stack"])
    dump.expect(pexpect.EOF)
    text = dump.before
    assert "threads in anon ranks" in text, text
    assert "in work" in text and "return local + 1" in text, text  # with the source line
    assert "in read_line" in text, text  # the paused ranks wait in pdb for a line
    con.sendline("continue")
    ctl.expect("script done")


def test_the_script_sees_its_paused_ranks_through_debug_controller(terms: Terminals) -> None:
    ctl = terms.controller("""
        from regency.actor import Actor, debug_controller, endpoint, this_host, current_rank

        class Worker(Actor):
            @endpoint
            def work(self) -> int:
                if current_rank().rank % 2:
                    breakpoint()
                return current_rank().rank

        if __name__ == "__main__":
            procs = this_host().spawn_procs(per_host={"procs": 4})
            fut = procs.spawn("Worker", Worker).work.call()
            paused = debug_controller().wait_pending_session(2, timeout=60)
            print("paused", [(i.actor_name, i.rank, i.function) for i in paused])
            print("results", [v for _, v in fut.get()])
    """)
    ctl.expect(r"paused \[\('Worker', 1, 'Worker.work'\), \('Worker', 3, 'Worker.work'\)\]")
    con = terms.console()
    con.expect(DBG)
    con.sendline("continue")
    ctl.expect(r"results \[0, 1, 2, 3\]")
    ctl.expect(pexpect.EOF)


def test_a_rank_on_a_worker_host_is_debugged_over_tcp(terms: Terminals) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    secret = {"REGENCY_SECRET": "debug-over-tcp-secret"}
    worker = terms._spawn(["-m", "regency", "worker", "--listen", f"tcp://127.0.0.1:{port}",
                           "--advertise", "127.0.0.1"], secret)
    terms.env.update(secret)
    ctl = terms.controller(f"""
        from regency.actor import Actor, attach_to_workers, endpoint, current_rank

        class Remote(Actor):
            @endpoint
            def where(self) -> int:
                here = "on the worker"
                breakpoint()
                return current_rank().rank

        if __name__ == "__main__":
            hosts = attach_to_workers(["tcp://127.0.0.1:{port}"])
            procs = hosts.spawn_procs(per_host={{"procs": 1}})
            print("results", [v for _, v in procs.spawn("Remote", Remote).where.call().get()])
    """)
    ctl.expect("regency debug")
    con = terms.console()
    con.expect(DBG)
    con.sendline("attach Remote 0")
    con.expect(PDB)
    con.sendline("p here")
    con.expect("'on the worker'")
    con.expect(PDB)
    con.sendline("c")
    ctl.expect(r"results \[0\]")
    ctl.expect(pexpect.EOF)
    worker.terminate(force=True)
