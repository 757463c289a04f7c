"""Relaying casts down a tree of procs (see ``regency._mesh._tree`` for the geometry).

A ``Tree`` describes one actor mesh: the global rank and proc address of every member, by
position. The sender of a message and every relay on its way ask ``next_hops`` where to
forward it: to the children whose subtrees hold targets. A dead relay is skipped by sending
to its children instead, so members behind it stay reachable.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from .._mesh import Shape, Slice
from .._mesh._tree import children, hops

Cast = tuple[tuple[str, ...], int, tuple[int, ...], tuple[int, ...]]
"""A cast's target slice as it travels: (labels, offset, sizes, strides)."""


class Tree:
    """The relay tree of one actor mesh."""

    __slots__ = ("addrs", "fanout", "n", "pos_of", "ranks")

    def __init__(self, ranks: Sequence[int], addrs: Sequence[str], fanout: int) -> None:
        self.ranks = tuple(ranks)
        self.addrs = tuple(addrs)
        self.n = len(self.ranks)
        self.fanout = fanout
        self.pos_of = {g: i for i, g in enumerate(self.ranks)}

    def next_hops(self, pos: int, cast: Cast, dead: Container[str]) -> list[str]:
        """Addresses to forward a message cast to ``cast`` to, from position ``pos``."""
        labels, offset, sizes, strides = cast
        count = 1
        for size in sizes:
            count *= size
        if count == self.n:  # the whole mesh: every child
            positions = list(children(pos, self.n, self.fanout))
        else:
            shape = Shape(labels, Slice(offset, sizes, strides))
            targets = [self.pos_of[g] for g in shape.ranks() if g in self.pos_of]
            positions = hops(pos, targets, self.n, self.fanout)
        out: list[str] = []
        for p in positions:
            self._reachable(p, cast, dead, out)
        return out

    def _reachable(self, pos: int, cast: Cast, dead: Container[str],
                   out: list[str]) -> None:
        addr = self.addrs[pos]
        if addr not in dead:
            out.append(addr)
            return
        out.extend(self.next_hops(pos, cast, dead))  # route around a dead relay

    def is_target(self, global_rank: int, cast: Cast) -> bool:
        """Whether the member at ``global_rank`` is one of the cast's targets."""
        _labels, offset, sizes, strides = cast
        try:
            Slice(offset, sizes, strides).local_rank(global_rank)
        except ValueError:
            return False
        return True
