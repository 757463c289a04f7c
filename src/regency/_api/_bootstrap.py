"""Starting and stopping the runtime of this process; ``this_host``, ``this_proc``.

In the controller the first regency call starts the runtime: an event loop on a daemon
thread, a listening socket, the local host agent, and the root client context. An ``atexit``
hook shuts it down (stopping every proc this process started). ``shutdown_context()`` does
the same on demand, and the next regency call starts a fresh runtime (for notebooks).
"""

from __future__ import annotations

import atexit
import os
import secrets
import threading
from typing import TYPE_CHECKING

from .._mesh import Extent, Point, Shape
from .._runtime import _current
from .._runtime._runtime import Runtime
from .._wire import new_secret

if TYPE_CHECKING:
    from ._context import Context
    from ._future import Future
    from ._host_mesh import HostMesh
    from ._proc_mesh import ProcMesh

__all__ = ["runtime", "shutdown_context", "this_host", "this_proc"]

_lock = threading.Lock()
_root_context: Context | None = None
_atexit_registered = False


def runtime() -> Runtime:
    """The runtime of this process, starting the controller runtime if needed."""
    rt = _current.get()
    if rt is not None:
        return rt
    with _lock:
        rt = _current.get()
        if rt is None:
            rt = _start_controller()
        return rt


def _start_controller() -> Runtime:
    global _atexit_registered, _root_context
    from .. import config
    from .._runtime import _output
    from .._runtime._host_agent import HostAgent
    from .._runtime._malloc import reuse_freed_memory
    from . import _dispatch

    if config.get("malloc_reuse"):
        reuse_freed_memory()
    job = secrets.token_hex(4)
    from .._runtime._secret import configured_secret

    rt = Runtime(secret=configured_secret() or new_secret(), job=job, role="controller")
    ready = threading.Event()
    failure: list[BaseException] = []

    def main() -> None:
        try:
            rt.loop.run_until_complete(rt.start(f"unix:@regency-{job}-root"))
        except BaseException as exc:  # reported to the starting thread
            failure.append(exc)
            ready.set()
            return
        ready.set()
        rt.loop.run_forever()

    thread = threading.Thread(target=main, name="regency-runtime", daemon=True)
    thread.start()
    ready.wait()
    if failure:
        raise RuntimeError(f"regency could not start its runtime: {failure[0]}") from failure[0]
    rt.root = rt.host_agent = rt.address
    rt.thread = thread
    rt.agent = HostAgent(rt)
    _output.install()  # procs' output is written between the script's lines, not inside
    _dispatch.install(rt)
    from . import _failfast

    _failfast.reset()
    _failfast.install_handler()
    _root_context = None
    _current.set_runtime(rt)
    if not _atexit_registered:
        atexit.register(_at_exit)
        _atexit_registered = True
    return rt


def root_context() -> Context:
    """The context of the root client (outside any actor)."""
    global _root_context
    from ._context import Context, Instance

    rt = runtime()
    if _root_context is None:
        empty = Point(0, Extent([], []))
        inst = Instance(actor_id=f"root@{rt.address}", name="root", class_name="",
                        rank=empty, proc_id=rt.address)
        _root_context = Context(inst, empty)
    return _root_context


def this_proc() -> ProcMesh:
    """The proc this code runs in, as a 0-dimensional ProcMesh.

    On the controller, actors spawned on it run inside the controller's own process.
    """
    from ._proc_mesh import ProcMesh

    rt = runtime()
    return ProcMesh(rt.proc_uid, "root", Shape.unity(), (rt.address,), (rt.host_agent,))


def this_host() -> HostMesh:
    """This machine, as a 0-dimensional HostMesh (a reference: it cannot be shut down)."""
    from ._host_mesh import HostMesh

    rt = runtime()
    agent = rt.agent
    if agent is not None:
        rt.call_soon(agent.start_zygote)  # warm the fork server before the first spawn
    return HostMesh(Shape.unity(), (rt.host_agent,), owned=False)


def shutdown_context(host_timeout: float | None = None) -> Future[None]:
    """Stop every proc this process started and the runtime itself.

    It does not exit the program; the next regency call starts a fresh runtime.
    """
    from ._future import completed

    rt = _current.get()
    if rt is None or rt.role != "controller":
        return completed(None)
    _shutdown(rt, host_timeout if host_timeout is not None else 5.0)
    return completed(None)


def _shutdown(rt: Runtime, timeout: float) -> None:
    from ._dispatch import stop_everything

    with _lock:
        if _current.get() is not rt or rt.stopping:
            return
        rt.stopping = True
    thread = rt.thread
    try:
        if thread is not None and thread.is_alive():
            try:
                rt.run_sync(lambda: stop_everything(rt, timeout), timeout=timeout + 5.0)
            except Exception:  # noqa: BLE001 - shutting down regardless
                pass
            try:
                rt.run_sync(_cancel_tasks, timeout=2.0)
            except Exception:  # noqa: BLE001
                pass
            rt.loop.call_soon_threadsafe(rt.loop.stop)
            thread.join(timeout=5.0)
    finally:
        with _lock:
            if _current.get() is rt:
                _current.set_runtime(None)


async def _cancel_tasks() -> None:
    """Cancel what is still running on the loop (a stop past its deadline, say), quietly."""
    import asyncio

    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=1.0)


def _at_exit() -> None:
    from .._runtime import _output
    from . import _failfast

    rt = _current.get()
    if rt is not None and rt.role == "controller":
        # after a fail-fast, healthy but busy actors are not waited for
        _shutdown(rt, 0.3 if _failfast.pending_exit_code() is not None else 3.0)
    _output.release_all()  # procs' lines held back by a line the script left open
    code = _failfast.pending_exit_code()
    if code is not None:
        os._exit(code)  # a failure arrived after the script's last line: never exit 0


def enable_transport(transport: str) -> None:
    """Choose how procs spawned from now on listen: ``"unix"`` (default) or ``"tcp"``."""
    name = str(transport).lower().removesuffix("://")
    aliases = {"ipc": "unix", "unix": "unix", "tcp": "tcp", "tcpwithlocalhost": "tcp"}
    if name not in aliases:
        raise ValueError(f"unknown transport {transport!r}; use 'unix' or 'tcp'")
    from .. import config

    config.configure(default_transport=aliases[name])

