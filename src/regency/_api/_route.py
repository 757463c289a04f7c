"""``Route``: where a message to a (sliced) actor mesh goes, computed once per mesh object."""

from __future__ import annotations

from .._mesh import Shape
from .._runtime._relay import Tree

__all__ = ["Route", "tree_for"]


class Route:
    """The members of a (sliced) mesh: ranks, their procs' addresses, the cast header.

    ``hops`` are the addresses the sender writes to: the members themselves, or for a mesh
    larger than the fan-out, the first relays of its tree (``tree``).
    """

    __slots__ = ("addrs", "cast", "hops", "ranks", "shape", "targets", "tree")

    def __init__(self, shape: Shape, proc_addrs: tuple[str, ...], tree: Tree | None) -> None:
        s = shape.slice
        self.shape = shape
        self.ranks = tuple(shape.ranks())
        self.addrs = [proc_addrs[g] for g in self.ranks]
        self.targets = frozenset(self.addrs)
        self.cast = (shape.labels, s.offset, s.sizes, s.strides)
        self.tree = tree
        self.hops = self.addrs if tree is None else tree.next_hops(-1, self.cast, ())

    @classmethod
    def member(cls, shape: Shape, local: int, proc_addrs: tuple[str, ...]) -> Route:
        """The route to the member at ``local`` of ``shape`` alone, with no tree (one hop),
        whose cast header is the whole of ``shape``: the member computes its message rank
        within it, not within a slice of one."""
        coords = shape.slice.coordinates(local)
        one = shape.select(**{lab: slice(c, c + 1) for lab, c in zip(shape.labels, coords)})
        route = cls(one, proc_addrs, None)
        s = shape.slice
        route.cast = (shape.labels, s.offset, s.sizes, s.strides)
        return route

    def current_hops(self, dead: dict[str, str]) -> list[str]:
        """``hops``, routing around relays known to be dead."""
        if self.tree is None or not dead:
            return self.hops
        return self.tree.next_hops(-1, self.cast, dead)


def tree_for(full: Shape, proc_addrs: tuple[str, ...], fanout: int) -> Tree | None:
    """The relay tree of a mesh of shape ``full``, or None when the sender reaches all."""
    if len(full) <= fanout:
        return None
    ranks = full.ranks()
    return Tree(ranks, [proc_addrs[g] for g in ranks], fanout)
