"""``_debug._logs.tail_lines``: the last lines of a file, read backwards in blocks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regency._debug import _logs
from regency._debug._logs import ProcLog, ProcLogs, tail_lines

# lines end at "\n" only: "\r" (progress bars), form feeds and Unicode separators stay inside
LINES = st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"],
                                                blacklist_characters="\n"), max_size=30),
                 max_size=40)


@settings(max_examples=200, deadline=None)
@given(LINES, st.integers(0, 50), st.sampled_from([1, 7, 64, 1 << 16]))
def test_the_last_n_lines_whatever_the_block_size(tmp_path_factory, lines, n, block) -> None:
    path = tmp_path_factory.mktemp("tail") / "proc.log"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    old, _logs._BLOCK = _logs._BLOCK, block
    try:
        assert tail_lines(path, n) == (lines[-n:] if n else [])
    finally:
        _logs._BLOCK = old


def test_a_missing_file_has_no_lines(tmp_path: Path) -> None:
    assert tail_lines(tmp_path / "none.log", 5) == []


def test_what_one_answer_carries_is_bounded(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "proc.log"
    path.write_text("  " + "x" * 100 + "\n  short\n  partial", encoding="utf-8")
    monkeypatch.setattr(_logs, "MAX_LINE", 10)
    assert tail_lines(path, 5) == ["  xxxxxxxx [... 92 more characters]", "  short",
                                   "  partial"]
    monkeypatch.setattr(_logs, "MAX_BYTES", 12)  # the end of the file only
    assert tail_lines(path, 5) == ["  partial"]  # not the cut line before it


def test_one_procs_lines_by_rank_or_coordinates() -> None:
    logs = ProcLogs([ProcLog("m", 0, {"gpus": 0}, "h", "/p0", ["  a", "! b"]),
                     ProcLog("m", 1, {"gpus": 1}, "h", "/p1", ["  c"])], {2: "no answer"})
    assert logs.of(0) == ["a", "b"] and logs.of(gpus=1) == ["c"]
    assert [log.stderr for log in logs] == [["b"], []]
    assert str(logs).splitlines()[:3] == ["== m {'gpus': 0}: last 2 lines of /p0 (on h) ==",
                                          "a", "! b"]
    assert "== rank 2: no answer ==" in str(logs)
    with pytest.raises(KeyError, match="no lines of the proc at rank 2: no answer"):
        logs.of(2)
    with pytest.raises(KeyError, match=r"at rank 9: the mesh has no proc there \(its ranks: "
                                       r"\[0, 1, 2\]\)"):
        logs.of(9)
    logs = ProcLogs([ProcLog("m", 0, {"gpus": 0}, "h", "/p2", ["  after"],
                             [ProcLog("m", 0, {"gpus": 0}, "h", "/p0", ["! crashed"])])],
                    {1: "cannot read /p1"}, {0: {"gpus": 0}, 1: {"gpus": 1}})
    assert str(logs).splitlines()[:2] == [
        "== m {'gpus': 0} (before a respawn): last 1 lines of /p0 (on h) ==", "! crashed"]
    assert logs.of(0) == ["after"]
    with pytest.raises(KeyError, match=r"\{'gpus': 1\}: cannot read /p1"):
        logs.of(gpus=1)
