"""The life of a proc: what a forked child of the fork server runs.

It starts a runtime on the main thread's loop, listens on its address, runs the mesh's
``bootstrap`` callable, announces itself to its host agent, and serves until told to stop or
until its host agent goes away (then it exits at once: no orphans).
"""

from __future__ import annotations

import asyncio
import faulthandler
import inspect
import mmap
import os
import pickle
import sys
import traceback
from typing import Any

from .. import _observe as observe
from .. import config
from .._mesh import Point, Shape
from .._runtime import _current
from .._runtime._runtime import Runtime
from .._wire._messages import ProcReady, StopProc
from . import _dispatch
from ._bootstrap import root_context_of
from ._context import Context, Instance, set_context
from ._context import _current as ctxvar
from ._proc_mesh import proc_mesh_of
from ._state import api_state
from ._stopping import stop_cells


def run_proc(spec: dict[str, Any]) -> int:
    """Serve as a proc described by ``spec``; returns the exit code."""
    faulthandler.enable()  # a crash prints the Python stack to stderr, into the failure report
    config.configure(**spec.get("config", {}))
    rt = Runtime(secret=spec["secret"], job=spec["job"], role="proc")
    _current.set_runtime(rt)
    host_agent = spec["host_agent"]
    rt.root = spec["root"]
    rt.host_agent = host_agent
    rt.proc_uid = spec["mesh_uid"]
    rt.proc_rank = spec["rank"]
    _dispatch.install(rt)
    for fd in spec.get("extra_fds", [])[:1]:
        rt.status_page = mmap.mmap(fd, 0)  # where we say which endpoint runs
        os.close(fd)
    stop = asyncio.Event()
    tasks: set[asyncio.Task[None]] = set()

    def on_stop(msg: StopProc) -> None:
        tasks.add(rt.loop.create_task(_stop(rt, stop)))

    rt.handle(StopProc, on_stop)

    def lost(addr: str, exc: BaseException | None) -> None:
        if addr == host_agent:
            os._exit(0)  # the host agent (and with it the controller) is gone

    rt.peer_lost_hooks.append(lost)
    asyncio.set_event_loop(rt.loop)
    return rt.loop.run_until_complete(_serve(rt, spec, stop))


async def _serve(rt: Runtime, spec: dict[str, Any], stop: asyncio.Event) -> int:
    await rt.start(spec.get("bind", spec["addr"]), identity=spec["addr"])
    if observe.enabled():
        observe.start_proc(rt, spec)
    api_state(rt).root_context = root_context_of(rt)
    error = await _bootstrap(rt, spec)
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
        traceback.print_exc()
        return f"bootstrap raised {type(exc).__name__}: {exc}"
    finally:
        ctxvar.reset(token)
    return None


async def _stop(rt: Runtime, stop: asyncio.Event) -> None:
    timeout = float(config.get("cleanup_timeout")) + 1.0
    await stop_cells(rt, timeout)
    observe.stop(rt)  # the last recorded rows go out before the sockets close
    sys.stdout.flush()
    sys.stderr.flush()
    await rt.router.aclose()
    stop.set()
