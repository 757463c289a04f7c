"""Starting and stopping the runtime of this process (the top layer of ``regency._api``).

In the controller the first regency call starts the runtime: an event loop on a daemon
thread, a listening socket, the local host agent, and the root client context. An ``atexit``
hook shuts it down (stopping every proc this process started). ``shutdown_context()`` does
the same on demand, and the next regency call starts a fresh runtime (for notebooks).
Lower layers reach the runtime through ``_process.runtime()``; this module hands it the
starter when it is imported.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import secrets
import threading

from .. import _observe as observe
from .. import config
from .._mesh import Extent, Point
from .._runtime import _current, _output
from .._runtime._host_agent import HostAgent
from .._runtime._malloc import reuse_freed_memory
from .._runtime._runtime import Runtime
from .._runtime._secret import configured_secret
from .._wire import new_secret
from . import _dispatch, _failfast
from ._context import Context, Instance
from ._future import Future, completed
from ._proc_mesh import proc_mesh_of
from ._process import lock, runtime, set_starter
from ._state import api_state
from ._stopping import stop_everything

__all__ = ["enable_transport", "root_context_of", "runtime", "shutdown_context"]

_atexit_registered = False


def _start_controller() -> Runtime:
    """Start this process's controller runtime (called by ``runtime()``, under its lock)."""
    global _atexit_registered
    if config.get("malloc_reuse"):
        reuse_freed_memory()
    job = secrets.token_hex(4)
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
    api_state(rt).root_context = root_context_of(rt)
    _failfast.reset()
    _failfast.install_handler()
    _current.set_runtime(rt)
    if observe.enabled():
        observe.start_controller(rt)
    if not _atexit_registered:
        atexit.register(_at_exit)
        _atexit_registered = True
    return rt


set_starter(_start_controller)


def root_context_of(rt: Runtime) -> Context:
    """The context of the root client of ``rt`` (outside any actor)."""
    empty = Point(0, Extent([], []))
    here = proc_mesh_of(rt)
    inst = Instance(actor_id=f"root@{rt.address}", name="root", class_name="", rank=empty,
                    proc_id=rt.address, _proc_mesh=here, _proc=here)
    return Context(inst, empty)


def shutdown_context(host_timeout: float | None = None) -> Future[None]:
    """Stop every proc this process started and the runtime itself.

    It does not exit the program; the next regency call starts a fresh runtime.
    """
    rt = _current.get()
    if rt is None or rt.role != "controller":
        return completed(None)
    _shutdown(rt, host_timeout if host_timeout is not None else 5.0)
    return completed(None)


def _shutdown(rt: Runtime, timeout: float) -> None:
    with lock():
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
        observe.stop(rt)  # rows still queued reach the store, which closes
        with lock():
            if _current.get() is rt:
                _current.set_runtime(None)


async def _cancel_tasks() -> None:
    """Cancel what is still running on the loop (a stop past its deadline, say), quietly."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=1.0)


def _at_exit() -> None:
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
    config.configure(default_transport=aliases[name])

