"""Which proc now stands for a rank whose proc died and was respawned (elastic meshes).

Addresses are never reused (a dead proc's address stays dead everywhere), so a respawned
rank gets a new proc at a new address. Meshes keep the address tuples they were made with;
this table maps an old address to its replacement, and meshes read their addresses through
:func:`current`. ``generation`` changes with every replacement, so that a mesh can tell that
routes it computed are out of date with one integer comparison.

The table is this process's: meshes that other processes received before a respawn still
name the dead proc (pass them again after a respawn).
"""

from __future__ import annotations

__all__ = ["current", "earlier", "generation", "replace", "resolve"]

generation = 0
_replaced: dict[str, str] = {}


def resolve(addr: str) -> str:
    """The address standing for ``addr`` now (itself unless it was replaced)."""
    while addr in _replaced:
        addr = _replaced[addr]
    return addr


def earlier(addr: str) -> list[str]:
    """The addresses that stood for ``addr``'s rank before the one standing for it now,
    oldest first (none unless it was replaced)."""
    out = []
    while addr in _replaced:
        out.append(addr)
        addr = _replaced[addr]
    return out


def current(addrs: tuple[str, ...]) -> tuple[str, ...]:
    """``addrs`` with each replaced address swapped for its replacement."""
    if not _replaced:
        return addrs
    return tuple(resolve(a) for a in addrs)


def replace(old: str, new: str) -> None:
    """Record that ``new`` stands for ``old`` from now on.

    Raises:
        ValueError: ``new`` is ``old``, or stands for it already (a cycle: never resolved).
    """
    global generation
    if resolve(new) == old or new == old:
        raise ValueError(f"address {new} cannot stand for {old}: it would stand for itself")
    _replaced[old] = new
    generation += 1
