"""The debug console's command parser and rank selectors (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regency._debug._commands import CommandError, parse, parse_spec


def test_short_forms_and_plain_commands() -> None:
    assert parse("l").name == "list"
    assert parse("  c ").name == "continue"
    assert parse("h").name == "help"
    assert parse("q").name == "quit"
    assert parse("").name == ""


def test_attach_names_actor_and_rank() -> None:
    cmd = parse("attach Trainer 3")
    assert (cmd.name, cmd.actor, cmd.rank) == ("attach", "Trainer", 3)
    assert parse("a Trainer 0").name == "attach"


@pytest.mark.parametrize("line, message", [
    ("frob", "unknown command 'frob'; commands: list, attach, cast"),
    ("attach Trainer", "usage: attach ACTOR RANK"),
    ("attach Trainer x", "the rank must be a number, not 'x'"),
    ("cast Trainer p x", "usage: cast ACTOR ranks(SPEC) PDB-COMMAND"),
    ("cast Trainer ranks(1)", "which pdb command?"),
    ("cast Trainer ranks(a) p x", "'a' is not a rank"),
    ("cast Trainer ranks() p x", "ranks() is empty"),
])
def test_bad_lines_say_what_was_wrong(line: str, message: str) -> None:
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(line)


def test_cast_keeps_the_whole_pdb_command() -> None:
    cmd = parse("cast Trainer ranks(1,4,6) p {'a': (1, 2)}")
    assert cmd.pdb_command == "p {'a': (1, 2)}"
    assert cmd.spec is not None
    assert [r for r in range(8) if cmd.spec.matches(r, {})] == [1, 4, 6]


@given(st.integers(0, 20), st.integers(0, 40), st.integers(1, 5))
def test_a_range_selects_what_python_slicing_selects(start: int, stop: int, step: int) -> None:
    spec = parse_spec(f"{start}:{stop}:{step}")
    assert [r for r in range(50) if spec.matches(r, {})] == list(range(50))[start:stop:step]


def test_open_ranges() -> None:
    assert [r for r in range(6) if parse_spec(":3").matches(r, {})] == [0, 1, 2]
    assert [r for r in range(6) if parse_spec("4:").matches(r, {})] == [4, 5]
    assert [r for r in range(6) if parse_spec("::2").matches(r, {})] == [0, 2, 4]


def test_dimension_selectors() -> None:
    spec = parse_spec("hosts=0:2, gpus=(1,3)")
    points = [{"hosts": h, "gpus": g} for h in range(3) for g in range(4)]
    chosen = [(p["hosts"], p["gpus"]) for p in points if spec.matches(0, p)]
    assert chosen == [(0, 1), (0, 3), (1, 1), (1, 3)]
    assert not parse_spec("dp=0").matches(0, {"hosts": 0})  # a dimension the rank lacks
