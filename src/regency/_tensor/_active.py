"""Which device mesh and stream are active: ``activate()`` stacks, ``no_mesh``, ``Stream``.

No torch here. The dispatch mode (``_dispatch``) is entered by the first activation and left
by the last; it reads the top of the mesh stack for every op (``None``: run locally).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Stream", "get_active_mesh", "get_active_stream", "no_mesh"]

_meshes: list[Any] = []  # DeviceMesh or None (no_mesh), innermost last
_streams: list[Stream] = []
_depth = [0]
#: (enter, exit) of the dispatch mode, installed by ``_dispatch`` when it is imported
mode_hooks: list[tuple[Callable[[], None], Callable[[], None]]] = []


def current() -> Any:
    """The innermost active DeviceMesh, or None (nothing active, or ``no_mesh``)."""
    return _meshes[-1] if _meshes else None


def any_active() -> bool:
    """Whether some activation (a mesh or ``no_mesh``) is open."""
    return bool(_meshes)


class Activation:
    """What ``activate()`` returns. As Monarch's, the mesh (or None: ``no_mesh``) is active
    from the call on, not only inside a ``with`` block: the end of the block, or
    :meth:`close` (``deactivate()``), makes it inactive again, flushing its ops."""

    def __init__(self, mesh: Any, flush: bool = True) -> None:
        self.mesh = mesh
        self.flush = flush  # send the mesh's ops when it ends (not for one op outside)
        self.open = True
        _meshes.append(mesh)
        if len(_meshes) == 1:
            for enter, _ in mode_hooks:
                enter()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End this activation (idempotent)."""
        if not self.open:
            return
        self.open = False
        try:
            if self.mesh is not None and self.flush:
                self.mesh.flush()
        finally:  # a flush that fails (a dead proc) still leaves the mesh inactive
            for i in range(len(_meshes) - 1, -1, -1):  # this one: the innermost of its mesh
                if _meshes[i] is self.mesh:
                    del _meshes[i]
                    break
            if not _meshes:
                for _, leave in mode_hooks:
                    leave()


def get_active_mesh() -> Any:
    """The active device mesh.

    Raises:
        ValueError: none is active (use ``with procs.activate():``).
    """
    mesh = current()
    if mesh is None:
        raise ValueError("no device mesh is active; use `with procs.activate():` first")
    return mesh


class _NoMesh:
    """``no_mesh.activate()``: torch runs locally inside, even under an active mesh."""

    def activate(self) -> Activation:
        """No device mesh is active from now until the end of the ``with`` block."""
        return Activation(None)

    def __repr__(self) -> str:
        return "no_mesh"


no_mesh = _NoMesh()


class Stream:
    """A logical stream of ops; every remote tensor belongs to one.

    Ops of one stream run in order. Workers run all streams of a mesh in one order today,
    which keeps every stream's order (streams do not yet overlap). A tensor belongs to one
    stream; :meth:`borrow` lends it to another.
    """

    def __init__(self, name: str, _default: bool = False) -> None:
        self.name = name
        self.default = _default

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        """Ops inside the block run on this stream."""
        _streams.append(self)
        try:
            yield
        finally:
            _streams.pop()

    def borrow(self, t: Any, mutable: bool = False) -> tuple[Any, Any]:
        """Lend remote tensor ``t`` to this stream: ``(borrowed_tensor, borrow)``.

        The borrowed tensor names the same values on every rank, on this stream. With
        ``mutable=False`` both streams may read and neither may write; with ``mutable=True``
        this stream may read and write, and ``t`` cannot be used at all, until
        ``borrow.drop()`` (or the end of ``with borrow:``). Breaking a rule is a
        ``TypeError`` at the call that breaks it (``BORROWED``, ``MUTATING_BORROW``, and
        ``DROPPED`` for the borrowed tensor after the drop).
        """
        from ._borrow import borrow  # imports torch: only once a tensor is borrowed

        return borrow(self, t, mutable)

    def __repr__(self) -> str:
        return f"<regency.Stream {self.name!r}{' (default)' if self.default else ''}>"


_main = Stream("main", _default=True)


def get_active_stream() -> Stream:
    """The stream ops run on now (``Stream("main")`` by default)."""
    return _streams[-1] if _streams else _main
