"""Spawning an actor in this process: its behavior in a cell, or a tombstone saying why not."""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any

from .. import config
from .._runtime._cell import AsyncCell, SyncCell
from .._runtime._relay import Tree
from .._runtime._runtime import Runtime
from .._wire import _messages as m
from ..errors import MeshFailure
from ._behavior import ActorBehavior
from ._stopping import Tombstone

__all__ = ["on_spawn_actor"]


def on_spawn_actor(rt: Runtime, msg: m.SpawnActor) -> None:
    """Make this proc's member of a new actor mesh (``__init__`` is its first message)."""
    try:
        g = msg.proc_addrs.index(rt.address)
    except ValueError:
        return
    _register_tree(rt, msg, g)
    why = rt.bootstrap_error
    if why is None:
        try:
            cls, args, kwargs = pickle.loads(msg.body)
        except Exception as exc:
            why = (f"the actor class {msg.class_name} (or its arguments) could not be loaded "
                   f"in the proc: {type(exc).__name__}: {exc}{_import_hint(exc, rt.hostname)}")
        msg.body = b""  # unpickled once: do not keep the bytes
    else:
        why = f"the proc failed to start: {why}"  # its proc_bind, or its bootstrap
    if why is not None:
        _spawn_failed(rt, msg, g, why)
        return
    behavior = ActorBehavior(rt, msg, cls, args, kwargs, g)
    if rt.observer is not None:  # recording (regency._observe): time its calls
        rt.observer.actor_spawned(behavior)
    cell: Any
    limits = behavior.mailbox_limits()
    if behavior.is_async:
        cell = AsyncCell(behavior.uid, behavior, rt.loop, behavior.setup_context, rt.on_loop,
                         rt, limits)
    else:
        cell = SyncCell(behavior.uid, behavior, behavior.setup_context, rt, limits)
        behavior.before_reply = cell.before_reply
    ack = msg.ack
    cell.control(lambda: behavior.init(ack))
    rt.add_cell(behavior.uid, cell)


def _import_hint(exc: BaseException, host: str) -> str:
    """What to do when a module the controller imports is not importable in the proc."""
    if not isinstance(exc, ModuleNotFoundError):
        return ""
    path = [p for p in sys.path if p][:4]
    return (f" (on host {host}, in {os.getcwd()}, its sys.path starting "
            f"{path}: make the module importable there: install its package on every "
            "host, start the worker where it can import it, or copy it with "
            "`await hosts.sync_workspace(Workspace(dirs=[...]))`)")


def _register_tree(rt: Runtime, msg: m.SpawnActor, g: int) -> None:
    """Remember the mesh's relay tree: this proc forwards casts to its children."""
    shape = msg.shape
    fanout = int(msg.fanout or config.get("max_cast_fanout"))
    if len(shape) > fanout:
        ranks = shape.ranks()
        rt.trees[msg.uid] = (Tree(ranks, [msg.proc_addrs[r] for r in ranks], fanout), g)


def _spawn_failed(rt: Runtime, msg: m.SpawnActor, g: int, why: str) -> None:
    """The actor cannot exist here: calls to it fail at once, and its owner is told."""
    shape = msg.shape
    local = shape.local_rank(g)
    failure = MeshFailure(mesh_name=msg.uid, ranks=[local], coords=[dict(shape.point(local))],
                          actor_class=msg.class_name, endpoint="__init__", host=rt.hostname,
                          pid=rt.pid, cause=why, kind="spawn")
    rt.add_cell(msg.uid, Tombstone(rt, msg.uid, why, failure, name=msg.name, rank=local))
    rt.send_reply(msg.ack, g, m.OK, None)
    rt.send_sys(msg.owner, m.ActorFailed(msg.uid, g, failure, msg.owner_uid))
