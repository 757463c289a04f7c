"""Parsing and grouping faulthandler's dumps (pure)."""

from __future__ import annotations

from regency._debug._stacks import Stacks, parse_dump

DUMP = """Thread 0x00007f0000000001 (most recent call first):
  File "/x/a.py", line 3 in wait
  File "/x/a.py", line 9 in run

Current thread 0x00007f0000000002 (most recent call first):
  File "/x/loop.py", line 40 in select
"""


def test_parse_dump_gives_one_record_per_thread() -> None:
    threads = parse_dump("m", 5, DUMP)
    assert [(t.thread, t.current, t.frames) for t in threads] == [
        ("0x00007f0000000001", False, ('File "/x/a.py", line 3 in wait',
                                       'File "/x/a.py", line 9 in run')),
        ("0x00007f0000000002", True, ('File "/x/loop.py", line 40 in select',)),
    ]


def test_identical_stacks_are_grouped_with_their_ranks() -> None:
    stacks = Stacks()
    for rank in range(4):
        stacks.threads.extend(parse_dump("m", rank, DUMP))
    odd = DUMP.replace("line 3 in wait", "line 7 in spin")
    stacks.threads.extend(parse_dump("m", 4, odd))
    stacks.missing[("m", 5)] = "(the proc has exited)"
    groups = stacks.groups()
    assert [len(g.members) for g in groups] == [5, 4, 1]
    text = str(stacks)
    assert "--- 5 threads in m ranks 0-4" in text
    assert "--- 4 threads in m ranks 0-3" in text
    assert "--- 1 thread in m ranks 4" in text
    assert "--- m rank 5: (the proc has exited)" in text


def test_the_python_handler_writes_what_the_parser_reads() -> None:
    """The safe handler's text (``format_threads``) is faulthandler's format: every thread,
    the current one marked, the most recent call first."""
    import sys
    import threading

    from regency._debug._dumps import format_threads

    started, release = threading.Event(), threading.Event()

    def parked_here() -> None:
        started.set()
        release.wait(30)

    t = threading.Thread(target=parked_here)
    t.start()
    try:
        assert started.wait(30)
        text = format_threads(sys._current_frames(), threading.get_ident())
    finally:
        release.set()
        t.join(30)
    threads = parse_dump("m", 0, text)
    current = [x for x in threads if x.current]
    assert len(current) == 1 and "test_the_python_handler_writes" in current[0].frames[0]
    parked = [x for x in threads if any("parked_here" in f for f in x.frames)]
    assert len(parked) == 1 and "in wait" in parked[0].frames[0]


def test_a_controllers_command_line_is_cut_at_a_word() -> None:
    """``regency debug`` and ``regency stack`` list controllers by their command lines."""
    from regency._debug._discovery import _shortened

    long = "/usr/bin/python -m pytest tests/system/test_debug_console.py -k attach"
    assert _shortened(long, 60) == "/usr/bin/python -m pytest..."
    assert _shortened("python job.py", 60) == "python job.py"
    assert _shortened("x" * 100, 20) == "x" * 17 + "..."
