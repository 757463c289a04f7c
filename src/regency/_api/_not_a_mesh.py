"""The mesh members Monarch's ``Actor`` carries for type checkers, and what they do here.

In Monarch, ``Actor`` derives from its mesh interface so that ``procs.spawn("x", Counter)``
type-checks as a ``Counter`` with ``slice``, ``stop``, ``extent``...; on an actor instance
those members raise ``NotImplementedError`` ("actor implementations are not meshes"). regency's
``Actor`` has the same names so that code written against Monarch's type stubs keeps its
shape, and each one says what to call instead. The properties raise ``AttributeError`` (so
``hasattr`` is false and an ``__init__`` may still assign an attribute of that name); the
methods raise ``TypeError``.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["NotAMesh"]

_WHY = ("an actor is not a mesh: {name} belongs to the ActorMesh that spawn() returned "
        "(call it there); inside an actor, context().actor_instance describes this actor"
        "{extra}")


def _refuse(name: str, extra: str = "") -> str:
    return _WHY.format(name=name, extra=extra)


class _MeshProperty:
    """A non-data descriptor: reading it on an actor explains; assigning it just works."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        raise AttributeError(_refuse(self.name))


class NotAMesh:
    """Mixin of :class:`~regency.actor.Actor`: Monarch's typing-only mesh members."""

    extent = _MeshProperty()
    sizes = _MeshProperty()
    initialized = _MeshProperty()

    def slice(self, **kwargs: Any) -> NoReturn:
        """Not on an actor: slice the ActorMesh that spawn() returned."""
        raise TypeError(_refuse("slice"))

    def split(self, **kwargs: Any) -> NoReturn:
        """Not on an actor: split the ActorMesh that spawn() returned."""
        raise TypeError(_refuse("split"))

    def flatten(self, name: str) -> NoReturn:
        """Not on an actor: flatten the ActorMesh that spawn() returned."""
        raise TypeError(_refuse("flatten"))

    def rename(self, **kwargs: Any) -> NoReturn:
        """Not on an actor: rename the ActorMesh that spawn() returned."""
        raise TypeError(_refuse("rename"))

    def size(self, dim: str | tuple[str, ...] | None = None) -> NoReturn:
        """Not on an actor: ``current_size()`` gives the sizes of the current message's slice."""
        raise TypeError(_refuse("size", "; current_size() gives the sizes of the slice the "
                                        "current message was sent to"))

    def stop(self, reason: str = "stopped by client") -> NoReturn:
        """Not on an actor: ``context().actor_instance.stop()`` stops this actor."""
        raise TypeError(_refuse("stop", "; context().actor_instance.stop(reason) stops this "
                                        "actor"))
