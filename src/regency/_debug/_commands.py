"""The debug console's commands, parsed (pure: no I/O).

``list`` | ``attach ACTOR RANK`` | ``cast ACTOR ranks(SPEC) PDB-COMMAND`` | ``continue`` |
``help`` | ``quit``, with Monarch's one-letter short forms (``l``, ``a``, ``c``, ``h``,
``q``). ``SPEC`` selects ranks: ``3``, ``1,4,6``, ``start:stop:step`` (each part optional),
or dimension selectors ``hosts=0:2, gpus=1`` (a value, a range, or ``(1,3)``, a list).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["COMMANDS", "Command", "CommandError", "RankSpec", "parse"]

COMMANDS = ("list", "attach", "cast", "continue", "help", "quit")
_SHORT = {"l": "list", "a": "attach", "c": "continue", "h": "help", "q": "quit", "?": "help",
          "exit": "quit"}


class CommandError(ValueError):
    """A line that is not a valid command; the message says what was wrong."""


@dataclass(frozen=True)
class RankSpec:
    """Which ranks a ``cast`` reaches: by rank (``ranks``) or by coordinates (``dims``)."""

    ranks: tuple[int | slice, ...] = ()
    dims: dict[str, tuple[int | slice, ...]] = field(default_factory=dict)

    def matches(self, rank: int, coords: dict[str, int]) -> bool:
        """Whether the rank with these coordinates is selected."""
        if self.ranks and not _hit(rank, self.ranks):
            return False
        for dim, wanted in self.dims.items():
            if dim not in coords or not _hit(coords[dim], wanted):
                return False
        return True


@dataclass(frozen=True)
class Command:
    """A parsed console line."""

    name: str  # one of COMMANDS, or "" for an empty line
    actor: str = ""
    rank: int = 0
    spec: RankSpec | None = None
    pdb_command: str = ""


def parse(line: str) -> Command:
    """Parse one line of the console."""
    text = line.strip()
    if not text:
        return Command("")
    word, _, rest = text.partition(" ")
    name = _SHORT.get(word, word)
    rest = rest.strip()
    if name in ("list", "continue", "help", "quit"):
        return Command(name)
    if name == "attach":
        return _attach(rest)
    if name == "cast":
        return _cast(rest)
    raise CommandError(f"unknown command {word!r}; commands: {', '.join(COMMANDS)} "
                       "(type 'help')")


def _attach(rest: str) -> Command:
    parts = rest.split()
    if len(parts) != 2:
        raise CommandError("usage: attach ACTOR RANK (see 'list' for what is paused)")
    try:
        rank = int(parts[1])
    except ValueError:
        raise CommandError(f"attach: the rank must be a number, not {parts[1]!r}") from None
    return Command("attach", actor=parts[0], rank=rank)


_CAST = re.compile(r"^(\S+)\s+ranks\((.*?)\)\s*(.*)$", re.S)


def _cast(rest: str) -> Command:
    m = _CAST.match(rest)
    if m is None:
        raise CommandError("usage: cast ACTOR ranks(SPEC) PDB-COMMAND, e.g. "
                           "cast Trainer ranks(0,2) p loss")
    actor, spec, command = m.group(1), m.group(2), m.group(3).strip()
    if not command:
        raise CommandError("cast: which pdb command? e.g. cast Trainer ranks(0:4) bt")
    return Command("cast", actor=actor, spec=parse_spec(spec), pdb_command=command)


def parse_spec(text: str) -> RankSpec:
    """Parse the inside of ``ranks(...)``."""
    text = text.strip()
    if not text:
        raise CommandError("ranks() is empty: give a rank, a list, a range or dim=value")
    if "=" not in text:
        return RankSpec(ranks=_values(text))
    dims: dict[str, tuple[int | slice, ...]] = {}
    for part in _split_dims(text):
        dim, _, value = part.partition("=")
        dim = dim.strip()
        if not dim or not value.strip():
            raise CommandError(f"ranks(): {part.strip()!r} is not DIM=VALUE")
        dims[dim] = _values(value.strip().strip("()[]"))
    return RankSpec(dims=dims)


def _split_dims(text: str) -> list[str]:
    """Split ``a=1, b=(1,3)`` at commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in parts if p.strip()]


def _values(text: str) -> tuple[int | slice, ...]:
    out: list[int | slice] = []
    for item in text.split(","):
        item = item.strip()
        try:
            if ":" in item:
                bits = [int(b) if b.strip() else None for b in item.split(":")]
                if len(bits) > 3:
                    raise ValueError
                out.append(slice(*bits))
            else:
                out.append(int(item))
        except ValueError:
            raise CommandError(f"ranks(): {item!r} is not a rank, a list or start:stop:step"
                               ) from None
    return tuple(out)


def _hit(value: int, wanted: tuple[int | slice, ...]) -> bool:
    for w in wanted:
        if isinstance(w, int):
            if value == w:
                return True
        else:
            start = w.start or 0
            step = w.step or 1
            if value >= start and (w.stop is None or value < w.stop) and \
                    (value - start) % step == 0:
                return True
    return False


HELP = """\
Commands (short forms in brackets):
  list [l]                          the paused ranks: actor, rank, coords, host, function, line
  attach [a] ACTOR RANK             talk to that rank's pdb; 'detach' comes back here
  cast ACTOR ranks(SPEC) COMMAND    send one pdb command to many ranks and show their output
                                    SPEC: 3 | 1,4,6 | start:stop:step | hosts=0:2, gpus=1
  continue [c]                      clear breakpoints and continue every paused rank
  help [h]                          this text
  quit [q]                          leave the console; the ranks stay paused for the next one
"""
