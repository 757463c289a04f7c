"""State shared by a mesh and its slices in this process, and who is spawning."""


from __future__ import annotations

import secrets
from typing import Any, TypeVar

from .._runtime._completion import Completion
from ._actor import Actor
from ._bootstrap import runtime
from ._context import _current
from ._state import api_state

__all__ = []

T = TypeVar("T", bound=Actor)


def _token() -> str:
    return secrets.token_hex(5)


class _MeshState:
    """State shared by a mesh and its slices in this process (never pickled)."""

    def __init__(self, n: int) -> None:
        self.ready = Completion("the mesh to start")
        self.waiting = n
        self.stopped: str | None = None  # proc meshes: the whole mesh was stopped
        self.stopped_ranks: set[int] = set()  # actor meshes: members stopped so far
        self.stop_reason = ""
        if n == 0:
            self.ready.set_result(True)


def _state(uid: str, n: int = 0) -> _MeshState:
    table = api_state(runtime()).mesh_state
    st = table.get(uid)
    if st is None:
        st = table[uid] = _MeshState(n)
    return st


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def countdown_port(n: int, done: Completion) -> tuple[str, int]:
    """A reply port that completes ``done`` after ``n`` acknowledgements (at once if 0)."""
    rt = runtime()
    left = {"n": n}

    def ack(reply: Any, frame: list[memoryview]) -> None:
        left["n"] -= 1
        if left["n"] <= 0:
            rt.close_port(port_id)
            done.set_result(None)

    port_id = rt.open_port(ack)
    if n <= 0:
        rt.close_port(port_id)
        done.set_result(None)
    return (rt.contact, port_id)


def _owner_uid() -> str | None:
    ctx = _current.get(None)
    return ctx.actor_instance.mesh_uid if ctx is not None else None


def _creator() -> Any:
    ctx = _current.get(None)
    if ctx is None:
        from ._bootstrap import root_context

        ctx = root_context()
    inst = ctx.actor_instance
    from ._context import Instance

    return Instance(inst.actor_id, inst.name, inst.class_name, inst.rank, inst.proc_id,
                    inst.creator, inst.mesh_uid)


