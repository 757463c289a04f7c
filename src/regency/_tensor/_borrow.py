"""Borrows: a tensor lent to another stream, with the reference's access rules.

Every storage a stream works on may carry an :class:`Access` (views of one tensor share it;
a tensor with none is plain "rw"). ``stream.borrow(t, mutable)`` gives a new tensor on
``stream`` naming the same local values on every rank, and restricts ``t``:

* an immutable borrow: both may read, neither may write (``MUTATING_BORROW``);
* a mutable borrow: the borrow may read and write, ``t`` may do neither (``BORROWED``), and
  no other borrow of ``t`` may be made until it is dropped.

``borrow.drop()`` (or leaving ``with borrow:``) ends it: the borrowed tensor and its views are
dropped (``DROPPED`` afterwards), ``t`` gets its rights back, and an error a mutable borrow's
stream left in the value reaches ``t``. Workers run all streams in one order (ADR 0023), so
the rules are what keeps programs correct once streams overlap; they are checked here, on
the controller, at the call that breaks them.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

from ._errors import bad_arguments, user_stack
from ._messages import BORROW, BORROW_DROP
from ._tensor import Tensor, make

__all__ = ["Access", "Borrow", "access_of", "borrow"]


class Access:
    """What a storage's tensors may do on their stream: ``mode`` holds ``r`` and/or ``w``."""

    __slots__ = ("__weakref__", "base", "borrows", "mode", "tensors")

    def __init__(self, mode: str = "rw") -> None:
        self.mode = mode
        self.base = mode  # the mode with no borrow out
        self.tensors: weakref.WeakSet[Tensor] = weakref.WeakSet()
        self.borrows: weakref.WeakSet[Borrow] = weakref.WeakSet()  # live borrows of it

    def where(self) -> str:
        """Where the live borrows were made (for error messages)."""
        return "".join(f"borrowed at (most recent call last):\n{b.frames}" for b in self.borrows)


def access_of(t: Tensor) -> Access:
    """The Access of ``t``'s storage, made when first needed."""
    a: Access | None = t._access
    if a is None:
        a = t._access = Access()
        a.tensors.add(t)
    return a


def share(out: Tensor, src: Tensor) -> None:
    """``out`` is a view of ``src``: it shares ``src``'s Access."""
    a = access_of(src)
    out._access = a
    a.tensors.add(out)


class Borrow:
    """A live borrow (from :meth:`Stream.borrow`); ``drop()`` ends it. A context manager."""

    def __init__(self, tensor: Tensor, origin: Access, mutable: bool) -> None:
        self.mutable = mutable
        self.dropped = False
        self.frames = user_stack()
        self._origin = origin
        self._access = tensor._access
        self._ref = tensor._ref
        self._mesh = tensor._mesh

    def __enter__(self) -> Borrow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop()

    def drop(self) -> None:
        """End the borrow: the borrowed tensor and its views are dropped, and the original
        gets its rights back (on its own stream, after the ops issued so far)."""
        self._drop(flush=True)

    def _drop(self, flush: bool) -> None:
        if self.dropped:
            return
        self.dropped = True
        origin = self._origin
        refs = [t._ref for t in list(origin.tensors) if t._dropped is None]
        self._mesh.issue_message(BORROW_DROP, (self._ref, refs if self.mutable else []),
                                 flush)
        for t in list(self._access.tensors):
            t.drop()
        origin.borrows.discard(self)
        if not origin.borrows:
            origin.mode = origin.base

    def __del__(self) -> None:
        if not getattr(self, "dropped", True):
            warnings.warn(
                "a borrow was garbage-collected before borrow.drop(); it is dropped now, "
                "which returns the tensor to its stream at this point. Call drop() (or use "
                f"`with borrow:`) where the borrow should end. The borrow was made at:\n"
                f"{self.frames}", stacklevel=2)
            try:
                self._drop(flush=False)
            except Exception:  # interpreter shutdown
                pass

    def __repr__(self) -> str:
        state = "dropped" if self.dropped else "live"
        return f"<regency Borrow {'mutable' if self.mutable else 'immutable'} {state}>"


def borrow(stream: Any, t: Any, mutable: bool) -> tuple[Tensor, Borrow]:
    """``stream.borrow(t, mutable)``: ``t`` lent to ``stream``; see the module docstring."""
    if not isinstance(t, Tensor):
        raise bad_arguments("Stream.borrow", [("argument 't'", "LOCAL_TENSOR")])
    if t._dropped is not None:
        raise bad_arguments("Stream.borrow", [("argument 't'", "DROPPED", _dropped_at(t))])
    origin = access_of(t)
    if "r" not in origin.mode:
        raise bad_arguments("Stream.borrow", [("argument 't'", "BORROWED", origin.where())])
    if mutable and "w" not in origin.mode:
        raise bad_arguments("Stream.borrow (mutable=True)",
                            [("argument 't'", "MUTATING_BORROW", origin.where())])
    mesh = t._mesh
    ref = mesh.new_ref()
    out = make(mesh, stream, ref, t._meta, None)
    access = out._access = Access("rw" if mutable else "r")
    access.tensors.add(out)
    b = Borrow(out, origin, mutable)
    origin.borrows.add(b)
    origin.mode = "" if mutable else "r"
    mesh.issue_message(BORROW, (ref, t._ref), True)
    return out, b


def _dropped_at(t: Tensor) -> str:
    return f"dropped at (most recent call last):\n{t._dropped}"
