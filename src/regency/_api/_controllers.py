"""``get_or_spawn_controller``: process-wide singleton actors living in the root client."""

from __future__ import annotations

from typing import Any, TypeVar

from .._runtime._completion import Completion
from .._runtime._runtime import Runtime
from .._wire._messages import OK, RAW_ERROR, GetOrSpawnController, Reply
from ._actor import Actor
from ._future import Future
from ._proc_mesh import proc_mesh_of
from ._process import runtime
from ._replies import decode, to_exception
from ._state import api_state

__all__ = ["get_or_spawn_controller", "on_get_or_spawn_controller"]

T = TypeVar("T", bound=Actor)


def get_or_spawn_controller(name: str, Class: type[T], *args: Any, **kwargs: Any) -> Future[T]:
    """The singleton actor mesh registered under ``name``, spawning it on first use.

    It lives in the root client's process; later calls return the same mesh and ignore their
    arguments.
    """
    rt = runtime()
    done = Completion(f"controller {name!r}")

    def on_reply(reply: Reply, frame: list[memoryview]) -> None:
        rt.close_port(port_id)
        value = decode(frame)
        if reply.status == OK:
            done.set_result(value)
        else:
            done.set_exception(to_exception(reply.status, value))

    port_id = rt.open_port(on_reply)
    rt.send_sys(rt.root, GetOrSpawnController(name, Class, args, kwargs,
                                              (rt.contact, port_id)))
    return Future._from(done)


def on_get_or_spawn_controller(rt: Runtime, msg: GetOrSpawnController) -> None:
    """At the root: answer with the singleton named ``msg.name``, spawned here on first use."""
    table = api_state(rt).controllers
    name = msg.name
    port = msg.port
    try:
        mesh = table.get(name)
        if mesh is None:
            mesh = proc_mesh_of(rt).spawn(name, msg.cls, *msg.args, **msg.kwargs)
            table[name] = mesh
        rt.send_reply(port, None, OK, mesh)
    except Exception as exc:
        rt.send_reply(port, None, RAW_ERROR, exc)
