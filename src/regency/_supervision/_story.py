"""The story: a bounded log of the events a state machine handled and the actions it took.

Each entry remembers the keys it mentions (mesh uids, owner uids, proc addresses, failure ids,
and call ids as ints), so ``story(key)`` answers "what happened to this?" in order. The log
keeps the newest entries only; it exists for debugging and for the text of
:class:`~regency._supervision.InvalidTransition`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeAlias

from regency._supervision._actions import Action
from regency._supervision._events import Event

__all__ = ["Story", "StoryEntry", "StoryKey", "render_story"]

StoryKey: TypeAlias = "str | int"
"""A uid, an address or a failure id (``str``), or a call id (``int``)."""


@dataclass(frozen=True, slots=True)
class StoryEntry:
    """One handled event or one action taken, numbered in the order it happened."""

    seq: int
    item: Event | Action
    keys: frozenset[StoryKey]

    @property
    def cause_id(self) -> str:
        """The cause id of the event or action."""
        return self.item.cause_id

    def __str__(self) -> str:
        arrow = "->" if isinstance(self.item, Event) else "<-"
        return f"{self.seq:>6} {arrow} [{self.cause_id}] {self.item!r}"


class Story:
    """A bounded, ordered log of :class:`StoryEntry`."""

    __slots__ = ("_entries", "_seq")

    def __init__(self, maxlen: int) -> None:
        self._entries: deque[StoryEntry] = deque(maxlen=maxlen)
        self._seq = 0

    def record(self, item: Event | Action, keys: Iterable[StoryKey]) -> None:
        """Append ``item``, mentioning ``keys``; the oldest entry goes when the log is full."""
        self._seq += 1
        self._entries.append(StoryEntry(self._seq, item, frozenset(keys)))

    def about(self, *keys: StoryKey) -> list[StoryEntry]:
        """The entries that mention any of ``keys``, oldest first."""
        wanted = set(keys)
        return [entry for entry in self._entries if not wanted.isdisjoint(entry.keys)]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[StoryEntry]:
        return iter(self._entries)


def render_story(entries: Iterable[StoryEntry]) -> str:
    """The entries as text, one per line (``->`` marks events, ``<-`` actions)."""
    lines = [str(entry) for entry in entries]
    return "\n".join(lines) if lines else "    (nothing recorded)"
