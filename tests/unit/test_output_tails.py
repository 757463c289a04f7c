"""``Tails``: the last lines of each worker proc, kept by the controller for its reports."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from regency._runtime._output_tails import ENDED, Tails


@given(st.lists(st.lists(st.text(max_size=5), max_size=8), max_size=12),
       st.integers(min_value=-2, max_value=40))
def test_the_last_lines_are_those_printed_last(batches: list[list[str]], n: int) -> None:
    tails = Tails(keep=25)
    for batch in batches:
        tails.add("via:a/p0", batch)
    printed = [line for batch in batches for line in batch]
    expected = printed[-min(n, 25):] if n > 0 else []
    assert tails.last("via:a/p0", n) == expected


def test_a_proc_that_ended_or_lost_its_agent_keeps_its_lines_a_while() -> None:
    """A report that waited for a proc's lines may read them just after the proc ended."""
    tails = Tails()
    for proc in ("via:a/p0", "via:a/p1", "via:b/p0", "unix:x"):
        tails.add(proc, [f"{proc} said"])
    tails.forget("unix:x")
    tails.forget_procs_of("a")
    assert tails.last("unix:x", 5) == ["unix:x said"]
    assert tails.last("via:a/p1", 5) == ["via:a/p1 said"]
    assert tails.last("via:b/p0", 5) == ["via:b/p0 said"]
    assert tails.last("never", 5) == []


def test_only_the_last_procs_that_ended_are_kept() -> None:
    tails = Tails()
    for n in range(ENDED + 10):
        tails.add(f"p{n}", [f"p{n} said"])
        tails.forget(f"p{n}")
    assert tails.last("p0", 5) == [] and tails.last("p9", 5) == []
    assert tails.last(f"p{ENDED + 9}", 5) == [f"p{ENDED + 9} said"]
    assert len(tails._ended) == ENDED
