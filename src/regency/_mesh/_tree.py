"""The relay tree of a multicast: who forwards a cast to whom (pure arithmetic).

The members of a mesh are numbered by *position* 0..n-1 (their order in the full mesh). With
fan-out ``f``, the sender is the virtual root; its children are positions ``0..f-1``, and the
children of position ``p`` are ``f*(p+1) .. f*(p+1)+f-1`` (those below ``n``): a heap layout
of depth ``log_f(n)``. Every message from one sender to one member — whole-mesh cast, cast to
a slice, or point call — travels the same path down this tree, so per-sender order holds
whichever kind of message it is, while the sender itself only writes to ``f`` relays.
"""

from __future__ import annotations

from collections.abc import Iterable


def children(pos: int, n: int, fanout: int) -> range:
    """Positions directly below ``pos`` (``-1`` is the sender)."""
    first = fanout * (pos + 1)
    return range(min(first, n), min(first + fanout, n))


def parent(pos: int, fanout: int) -> int:
    """The position above ``pos`` (``-1`` when the sender sends to it directly)."""
    return pos // fanout - 1


def path(pos: int, fanout: int) -> list[int]:
    """Positions from the first relay down to ``pos`` (inclusive)."""
    out = [pos]
    while (pos := parent(pos, fanout)) >= 0:
        out.append(pos)
    return out[::-1]


def hops(pos: int, targets: Iterable[int], n: int, fanout: int) -> list[int]:
    """The children of ``pos`` whose subtrees hold at least one target.

    ``targets`` are positions; ``pos == -1`` asks for the sender's first hops.
    """
    wanted: set[int] = set()
    for t in targets:
        p = path(t, fanout)
        if pos == -1:
            wanted.add(p[0])
        elif pos in p[:-1]:
            wanted.add(p[p.index(pos) + 1])
    return sorted(wanted)
