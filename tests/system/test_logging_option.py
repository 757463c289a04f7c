"""``ProcMesh.logging_option``: aggregation of alike lines, hiding, levels; every proc's
whole output on disk, named in failure reports. Whole controller programs in a subprocess."""

from __future__ import annotations

import re
from pathlib import Path

from _scripts import run_script

TALKER = """
    import asyncio, sys
    from regency.actor import Actor, endpoint, this_host, current_rank

    class Talker(Actor):
        @endpoint
        def talk(self, step: int) -> None:
            r = current_rank().rank
            print(f"step {step} loss {0.5 + r / 100:.3f}")
            if r == 3:
                print("rank 3 is special")
            print("a warning", file=sys.stderr)

    if __name__ == "__main__":
        procs = this_host().spawn_procs(per_host={"procs": 8}, name="talkers")
        asyncio.run(procs.logging_option(%s))
        t = procs.spawn("talk", Talker)
        t.talk.call(1).get()
        procs.stop().get()
        print("script done")
"""


def test_alike_lines_are_shown_once_with_a_count(tmp_path: Path) -> None:
    # a window longer than the whole run: everything is shown once, at exit
    run = run_script(tmp_path, TALKER % "aggregate_window_sec=60")
    assert run.returncode == 0, run.stderr
    assert "[8 similar lines from talkers {'procs': 0-7}] step 1 loss 0.5" in run.stdout, (
        run.stdout)
    assert re.search(r"\[talkers \{'procs': 3\}\] rank 3 is special", run.stdout), run.stdout
    assert "[8 similar lines from talkers {'procs': 0-7}] a warning" in run.stderr, run.stderr
    assert "script done" in run.stdout


def test_hidden_output_and_levels(tmp_path: Path) -> None:
    run = run_script(tmp_path, TALKER % "stream_to_client=False")
    assert run.returncode == 0, run.stderr
    assert "loss" not in run.stdout and "a warning" not in run.stderr
    run = run_script(tmp_path, TALKER % "level=30")  # WARNING: stderr only
    assert "loss" not in run.stdout, run.stdout
    assert run.stderr.count("a warning") == 8, run.stderr


def test_every_line_is_kept_on_disk_and_the_failure_report_names_the_file(
        tmp_path: Path) -> None:
    source = """
        import os
        from regency.actor import Actor, endpoint, this_host

        class Dies(Actor):
            @endpoint
            def die(self) -> None:
                for i in range(300):
                    print(f"line {i}")
                os._exit(5)

        if __name__ == "__main__":
            procs = this_host().spawn_procs(per_host={"procs": 1})
            procs.spawn("dies", Dies).die.call_one().get()
    """
    logs = tmp_path / "logs"
    run = run_script(tmp_path, source, env={"REGENCY_LOG_DIR": str(logs)})
    assert run.returncode != 0
    found = re.search(r"full output: (\S+\.log) \(on ", run.stderr)
    assert found, run.stderr
    path = Path(found.group(1))
    assert path.parent == logs
    kept = path.read_text().splitlines()
    assert [ln.strip() for ln in kept if "line " in ln] == [f"line {i}" for i in range(300)]
