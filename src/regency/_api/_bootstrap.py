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
from .._config_types import ChannelTransport, transport_name
from .._debug._logs import serve_logs
from .._debug._service import serve as serve_debugging
from .._debug._stacks import serve_dumps
from .._mesh import Extent, Point
from .._runtime import _current, _output
from .._runtime._aggregate import flush_all as flush_windows
from .._runtime._heap import freeze_start_heap
from .._runtime._host_agent import HostAgent
from .._runtime._host_agent import _write_lines as write_now
from .._runtime._malloc import reuse_freed_memory
from .._runtime._runtime import Runtime
from .._runtime._secret import SecretError, configured_secret
from .._runtime._user_secret import user_secret
from .._wire import new_secret
from . import _dispatch, _failfast, _terminate
from . import _hang_notice as hang_notice
from ._context import Context, Instance
from ._future import Future, completed
from ._proc_mesh import proc_mesh_of
from ._process import lock, runtime, set_starter
from ._state import api_state
from ._stopping import stop_everything

__all__ = ["enable_transport", "root_context_of", "runtime", "shutdown_context"]



def _start_controller() -> Runtime:
    """Start this process's controller runtime (called by ``runtime()``, under its lock)."""
    config._check_environment()  # a bad REGENCY_* stops us here, named, before anything runs
    if config.get("malloc_reuse"):
        reuse_freed_memory()
    job = secrets.token_hex(4)
    rt = Runtime(secret=_controller_secret(), job=job, role="controller")
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
    serve_debugging(rt)  # breakpoint() in procs pauses them; `regency debug` attaches
    serve_dumps(rt, rt.agent)  # stack dumps of this machine's procs
    serve_logs(rt)  # the last lines of this machine's procs' log files
    _output.install()  # procs' output is written between the script's lines, not inside
    _dispatch.install(rt)
    api_state(rt).root_context = root_context_of(rt)
    _failfast.reset()
    _failfast.install_handler()
    _terminate.install_in_controller()  # SIGTERM (SLURM, Kubernetes) stops like Ctrl-C
    hang_notice.start(rt)  # a get() waiting long on a live callee says so, with its stacks
    _current.set_runtime(rt)
    if observe.enabled():
        observe.start_controller(rt)
    if config.get("gc_freeze"):
        freeze_start_heap()  # full GC passes skip what the script has imported (once)
    return rt


def _controller_secret() -> bytes:
    """The configured secret, else this user's (so that workers attach with no setup); a
    random one when the user's file is unusable (local procs need nothing more, and
    ``attach_to_workers`` says what is wrong with the file)."""
    secret = configured_secret()
    if secret is not None:
        return secret
    try:
        return user_secret()
    except SecretError:
        return new_secret()


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


#: Seconds a shutdown lets failure reports wait for their procs' lines (``TIMEOUT_S``: 1).
_HOOKS_S = 1.5


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
            sup = api_state(rt).supervisor
            try:  # a failure's report still waiting for its proc's lines goes out first
                if sup is not None:
                    rt.run_sync(lambda: sup.hooks_settled(_HOOKS_S), timeout=_HOOKS_S + 1.0)
            except Exception:  # noqa: BLE001
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
    _terminate.exiting()
    _failfast.exit_hook_started()
    rt = _current.get()
    if rt is not None and rt.role == "controller":
        # after a fail-fast, healthy but busy actors are not waited for
        _shutdown(rt, 0.3 if _failfast.pending_exit_code() is not None else 3.0)
    flush_windows(write_now)  # lines held for an aggregation window
    _output.release_all()  # procs' lines held back by a line the script left open
    code = _failfast.pending_exit_code()
    if code is not None:
        _failfast.say_how_many_more()
        os._exit(code)  # a failure arrived after the script's last line: never exit 0


def enable_transport(transport: str | ChannelTransport) -> None:
    """Choose how procs spawned from now on listen: ``"unix"`` (default) or ``"tcp"``.

    A :class:`~regency.config.ChannelTransport` is accepted too (``Unix``, ``TcpWithLocalhost``,
    ``TcpWithHostname``); one that cannot exist here raises ``ValueError`` saying why."""
    config.configure(default_transport=transport_name(transport))

# Registered on import, before the script's own handlers: atexit runs them last first, so the
# script's handlers run before this one, which may end the process with os._exit (a failure
# that came after the script's last line must not exit 0).
atexit.register(_at_exit)
