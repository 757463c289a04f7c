"""The life of a proc: what a forked child of the fork server runs.

It starts a runtime on the main thread's loop, listens on its address, runs the mesh's
``bootstrap`` callable, announces itself to its host agent, and serves until told to stop or
until its host agent goes away (then it exits at once: no orphans).
"""

from __future__ import annotations

import asyncio
import atexit
import faulthandler
import gc
import inspect
import mmap
import os
import pickle
import sys
import time
import traceback
from typing import Any

from .. import _observe as observe
from .. import config
from .._debug import _rank as _debug_rank
from .._debug._dumps import arm as arm_stack_dumps
from .._mesh import Point, Shape
from .._ratelog import warnings_on_stderr
from .._runtime import _current, _output_fence, _output_marks, _procbind, _whole_lines
from .._runtime._descendants import GRACE_S, mark_forks
from .._runtime._host_agent import AGENT_LOST_EXIT
from .._runtime._loop_spin import LoopSpin
from .._runtime._runtime import Runtime
from .._runtime._script import set_script
from .._wire._messages import ProcReady, ProcRetiring, StopProc
from . import _dispatch, _terminate
from ._bootstrap import root_context_of
from ._context import Context, Instance, set_context
from ._context import _current as ctxvar
from ._proc_mesh import proc_mesh_of
from ._replies import with_sources
from ._state import api_state
from ._stopping import stop_cells


def _finalize() -> None:
    """What a Python exit would do, as Monarch's procs do when their mesh stops: collect the
    stopped actors (their ``__del__`` runs) and run the ``atexit`` handlers, while the
    connection to the host agent still carries what they print."""
    gc.collect()
    if config.get("kill_proc_descendants"):
        _end_multiprocessing_children()
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - a handler's error is printed, the stop goes on
        traceback.print_exc()


def _end_multiprocessing_children(grace: float = GRACE_S) -> None:
    """End the ``multiprocessing`` children an actor started.

    ``multiprocessing``'s ``atexit`` handler joins them (after a SIGTERM for daemons):
    the ending proc waited for one that is not a daemon, or that ignores SIGTERM, until
    its stop timed out and it was killed (13 s, measured). They end with the proc anyway
    (ADR 0040): SIGTERM now, SIGKILL to those still there ``grace`` s later."""
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return
    try:
        children = mp.active_children()
    except Exception:  # noqa: BLE001 - a forked child's multiprocessing state, say
        return
    for child in children:
        child.terminate()
    limit = time.monotonic() + grace
    for child in children:
        child.join(max(0.0, limit - time.monotonic()))
    for child in children:
        if child.is_alive():
            child.kill()
            child.join(1.0)


def run_proc(spec: dict[str, Any]) -> int:
    """Serve as a proc described by ``spec``; returns the exit code."""
    bind_error = _procbind.apply(spec.get("proc_bind"))  # first: the threads to come inherit it
    faulthandler.enable()  # a crash prints the Python stack to stderr, into the failure report
    warnings_on_stderr()  # regency's warnings here reach the controller's terminal
    config.configure(**spec.get("config", {}))
    set_script(spec.get("script", ""))  # the controller's: code carried by value is from it
    if "order_output" in spec:  # the controller's, even from its environment: it decides
        config.configure(order_output=spec["order_output"])
    rt = Runtime(secret=spec["secret"], job=spec["job"], role="proc")
    _current.set_runtime(rt)
    host_agent = spec["host_agent"]
    rt.root = spec["root"]
    rt.root_addresses = {rt.root, *spec.get("root_addresses", ())}
    rt.host_agent = host_agent
    rt.proc_uid = spec["mesh_uid"]
    rt.proc_rank = spec["rank"]
    _dispatch.install(rt)
    _output_fence.install(rt)  # a reply waits for the lines printed before it
    if rt.output_fence is None and spec.get("output_marks_to"):  # a worker's proc
        rt.output_fence = _output_marks.install(
            spec["addr"], {spec["output_marks_to"], *rt.root_addresses})
    _whole_lines.install()  # two actors printing at once do not tear each other's lines
    _debug_rank.install()  # breakpoint() pauses this rank; the console is at the controller
    arm_stack_dumps()  # its host agent can read every thread's stack, whatever it is doing
    mark_forks()  # a child it forks without a program is known as its own when it ends
    for fd in spec.get("extra_fds", [])[:1]:
        rt.status_page = mmap.mmap(fd, 0)  # where we say which endpoint runs
        os.close(fd)
    stop = asyncio.Event()
    tasks: set[asyncio.Task[None]] = set()

    def on_stop(msg: StopProc) -> None:
        if rt.stopping:
            return  # a stop (its SIGTERM, say) is under way: it ends the proc
        rt.stopping = True
        _say_retiring(rt, msg.reason)
        tasks.add(rt.loop.create_task(_stop(rt, stop)))

    def on_sigterm() -> None:  # SLURM, Kubernetes: clean up, then end by SIGTERM
        tasks.add(rt.loop.create_task(_terminated(rt)))

    rt.handle(StopProc, on_stop)
    _terminate.install_in_proc(lambda: rt.loop.call_soon_threadsafe(on_sigterm))

    def lost(addr: str, exc: BaseException | None) -> None:
        if addr == host_agent:
            _host_agent_lost(rt, exc)

    rt.router.patient.add(host_agent)  # load slows its handshake; only a connection's end
    # (or the parent-death signal) says it is gone
    rt.peer_lost_hooks.append(lost)
    asyncio.set_event_loop(rt.loop)
    return rt.loop.run_until_complete(_serve(rt, spec, stop, bind_error))


def _host_agent_lost(rt: Runtime, exc: BaseException | None) -> None:
    """The connection to our host agent ended: it (and with it the controller) is most
    likely gone, so this proc ends at once (no orphans). It says why first, in a line its
    failure report quotes if anyone still reads it, and exits with ``AGENT_LOST_EXIT``,
    never 0, so that a host agent that does live reports a failure, not a clean exit."""
    why = f"{type(exc).__name__}: {exc}" if exc is not None else "it closed the connection"
    try:
        sys.stderr.write(f"regency: proc {rt.address} lost its connection to its host agent "
                         f"{rt.host_agent} ({why}); exiting with code {AGENT_LOST_EXIT}\n")
        sys.stderr.flush()
    finally:
        os._exit(AGENT_LOST_EXIT)


async def _serve(rt: Runtime, spec: dict[str, Any], stop: asyncio.Event,
                 bind_error: str | None) -> int:
    await rt.start(spec.get("bind", spec["addr"]), identity=spec["addr"])
    spin = float(config.get("loop_spin"))
    if spin > 0:  # async actors run on this loop: it polls a moment before it sleeps
        rt.loop_spin = LoopSpin(rt.loop, rt.read_here, spin)
    if observe.enabled():
        observe.start_proc(rt, spec)
    api_state(rt).root_context = root_context_of(rt)
    error = bind_error or await _bootstrap(rt, spec)
    if error is not None:
        rt.bootstrap_error = error  # actors spawned here fail, saying why
    rt.send_sys(spec["host_agent"], ProcReady(rt.address, os.getpid(), error, rt.bound_address))
    await stop.wait()
    return 0


async def _bootstrap(rt: Runtime, spec: dict[str, Any]) -> str | None:
    data = spec.get("bootstrap")
    if data is None:
        return None
    shape: Shape = spec["shape"]
    point: Point = shape.point(spec["rank"])
    here = proc_mesh_of(rt)
    inst = Instance(actor_id=f"setup@{spec['addr']}", name="setup", class_name="bootstrap",
                    rank=point, proc_id=spec["addr"], _proc_mesh=here, _proc=here)
    token = set_context(Context(inst, point))
    try:
        fn = pickle.loads(data)
        result = fn()
        if inspect.isawaitable(result):
            await result
    except BaseException as exc:
        sys.stderr.write(with_sources(traceback.format_exc()))  # the script's lines named
        return f"bootstrap raised {type(exc).__name__}: {exc}"
    finally:
        ctxvar.reset(token)
    return None


def _say_retiring(rt: Runtime, reason: str) -> None:
    """Tell every peer this proc talks to that it is being stopped on purpose, and why:
    one that did not spawn it (an actor mesh its owner handed out) would otherwise see only
    a lost connection."""
    msg = ProcRetiring(rt.address, reason)
    for peer in list(rt.router.peers):  # its host agent too: it may be the controller
        if peer not in rt.my_addresses:
            rt.send_sys(peer, msg)


async def _stop(rt: Runtime, stop: asyncio.Event) -> None:
    timeout = float(config.get("cleanup_timeout")) + 1.0
    await stop_cells(rt, timeout)
    observe.stop(rt)  # the last recorded rows go out before the sockets close
    _finalize()
    _whole_lines.flush_all()
    await rt.router.aclose()
    stop.set()


async def _terminated(rt: Runtime) -> None:
    """SIGTERM: run every actor's ``__cleanup__``, then end by SIGTERM (so the owner's
    supervision names it). A stop already under way finishes as asked instead."""
    if rt.stopping:
        return
    rt.stopping = True
    await stop_cells(rt, float(config.get("cleanup_timeout")) + 1.0,
                     "the proc is stopping: it received SIGTERM")
    await rt.router.aclose()
    _terminate.die_by_sigterm()
