"""Relaying casts down a tree of procs (see ``regency._mesh._tree`` for the geometry).

A ``Tree`` describes one actor mesh: the global rank and proc address of every member, by
position. The sender of a message and every relay on its way ask ``next_hops`` where to
forward it: to the children whose subtrees hold targets. A dead relay is skipped by sending
to its children instead, so members behind it stay reachable.

A relay asks ``relay`` instead: where to forward a cast and whether it is a target itself.
Working that out walks the cast's members, so the answer is kept per cast (a mesh sees few
distinct slices): a relay then does no per-member work for a cast it has seen before.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from .._mesh import Shape, Slice
from .._mesh._tree import children, hops
from .._wire._messages import Cast

_PLANS_KEPT = 256  # distinct casts remembered per tree (then forgotten all at once)


class Tree:
    """The relay tree of one actor mesh."""

    __slots__ = ("_plans", "addrs", "fanout", "n", "pos_of", "ranks")

    def __init__(self, ranks: Sequence[int], addrs: Sequence[str], fanout: int) -> None:
        self.ranks = tuple(ranks)
        self.addrs = tuple(addrs)
        self.n = len(self.ranks)
        self.fanout = fanout
        self.pos_of = {g: i for i, g in enumerate(self.ranks)}
        self._plans: dict[tuple[int, Cast], tuple[tuple[int, ...], tuple[str, ...], bool]] = {}

    def relay(self, me: int, cast: Cast, dead: Container[str]) -> tuple[Sequence[str], bool]:
        """At the member of global rank ``me``: where to forward a cast to ``cast``, and
        whether ``me`` is one of its targets. Kept per cast; a dead child is routed around."""
        key = (me, cast)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= _PLANS_KEPT:
                self._plans.clear()
            found = self._positions(self.pos_of[me], cast)
            plan = (tuple(found), tuple(self.addrs[p] for p in found), self.is_target(me, cast))
            self._plans[key] = plan
        positions, addrs, mine = plan
        if dead and any(a in dead for a in addrs):
            out: list[str] = []
            for p in positions:
                self._reachable(p, cast, dead, out)
            return out, mine
        return addrs, mine

    def next_hops(self, pos: int, cast: Cast, dead: Container[str]) -> list[str]:
        """Addresses to forward a message cast to ``cast`` to, from position ``pos``."""
        out: list[str] = []
        for p in self._positions(pos, cast):
            self._reachable(p, cast, dead, out)
        return out

    def _positions(self, pos: int, cast: Cast) -> list[int]:
        """The children of ``pos`` with targets of ``cast`` below them."""
        labels, offset, sizes, strides = cast
        count = 1
        for size in sizes:
            count *= size
        if count == self.n:  # the whole mesh: every child
            return list(children(pos, self.n, self.fanout))
        shape = Shape(labels, Slice(offset, sizes, strides))
        targets = [self.pos_of[g] for g in shape.ranks() if g in self.pos_of]
        return hops(pos, targets, self.n, self.fanout)

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
