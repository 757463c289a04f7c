"""Which handler answers which system message: the API layer's table, installed per runtime.

* in every runtime: ``SpawnActor`` (``_spawning``), ``StopActor`` (``_stopping``), and at
  owners ``ActorFailed``, ``ProcUp``, ``ProcExited`` and lost connections (``_failures``);
  ``ProcOutput`` is written out here (and its lines kept, ``_output_tails``), and
  ``OutputMark`` kept (``_output_catchup``);
* at the root: ``GetOrSpawnController`` (``_controllers``);
* ``Fault``: test-only fault injection, carried out by ``regency.testing``;
* ``WaitProbe``, ``WaitCycle``: probes of calls that wait on each other, and the news of a
  cycle they found (``_waits``).
* ``CancelCall``: stop a call its caller cancelled (``_cancel``).
* ``Adopt``: a proc of a reattached mesh takes a new controller (``_kept``).

Procs add ``StopProc`` (``_proc_main``), workers their lease messages (``_workers``).
"""

from __future__ import annotations

from .. import config
from .._runtime._host_agent import write_lines
from .._runtime._output_catchup import book
from .._runtime._output_tails import tails
from .._runtime._runtime import Runtime
from .._wire import _messages as m
from ._cancel import install as install_cancel
from ._controllers import on_get_or_spawn_controller
from ._failures import on_actor_failed, on_peer_lost, on_proc_exited, on_proc_up
from ._kept import on_adopt
from ._spawning import on_spawn_actor
from ._state import api_state
from ._stopping import on_stop_actor
from ._supervisor import Supervisor
from ._waits import install as install_wait_probes

__all__ = ["install"]


def install(rt: Runtime) -> None:
    """Register the API layer's handlers in ``rt``, and its supervisor."""
    rt.handle(m.SpawnActor, lambda msg: on_spawn_actor(rt, msg))
    rt.handle(m.StopActor, lambda msg: on_stop_actor(rt, msg))
    rt.handle(m.ActorFailed, lambda msg: on_actor_failed(rt, msg))
    rt.handle(m.ProcUp, lambda msg: on_proc_up(rt, msg))
    rt.handle(m.ProcExited, lambda msg: _proc_exited(rt, msg))
    rt.handle(m.GetOrSpawnController, lambda msg: on_get_or_spawn_controller(rt, msg))
    rt.handle(m.Fault, lambda msg: _inject_fault(rt, msg))
    rt.handle(m.ProcOutput, _proc_output)
    rt.handle(m.OutputMark, lambda msg: _output_mark(rt, msg))
    rt.handle(m.Adopt, lambda msg: on_adopt(rt, msg))
    install_wait_probes(rt)
    install_cancel(rt)
    rt.peer_lost_hooks.append(lambda addr, exc: on_peer_lost(rt, addr, exc))
    rt.peer_lost_hooks.append(lambda addr, exc: _lines_lost_with(rt, addr))
    sup = api_state(rt).supervisor = Supervisor(rt)
    rt.undeliverable_text = sup.undeliverable
    rt.handle(m.ProcRetiring, lambda msg: sup.proc_retired(msg.addr, msg.reason))


def _proc_output(msg: m.ProcOutput) -> None:
    """A worker's proc printed: write its lines, then say how much of its pipe they end."""
    if msg.lines:
        write_lines(msg.label, msg.stream, msg.lines)
        if msg.proc:
            tails.add(msg.proc, msg.lines)  # for its failure report (``Supervisor``)
    if msg.read >= 0:
        book.read(msg.proc, 1 if msg.stream == "stderr" else 0, msg.read)


def _output_mark(rt: Runtime, msg: m.OutputMark) -> None:
    """A worker's proc marked its output: the controller waits for those lines before it
    hands the next values over; a proc passes the marks on to the controller."""
    fence = rt.output_fence
    if fence is not None:  # a proc that orders its output: it passes the marks on
        fence.carry(msg)
    elif rt.role == "controller" and config.get("order_output"):
        for proc, stdout, stderr in msg.marks:
            book.want(proc, stdout, stderr)


def _lines_lost_with(rt: Runtime, addr: str) -> None:
    """A worker's agent was lost: the lines of its procs will not come (a worker's procs
    are named ``via:AGENT/...``, whoever spawned them). A lost proc's lines come after its
    connection ends, from its agent: its ``ProcExited`` forgets it."""
    book.forget_procs_of(addr)
    tails.forget_procs_of(addr)
    for record in api_state(rt).proc_meshes.values():
        for proc, agent in zip(record.addr_list, record.agents, strict=False):
            if agent == addr:
                book.forget(proc)
                tails.forget(proc)


def _proc_exited(rt: Runtime, msg: m.ProcExited) -> None:
    book.forget(msg.addr)
    tails.forget(msg.addr)  # its exit report carries its agent's tail
    on_proc_exited(rt, msg)


def _inject_fault(rt: Runtime, msg: m.Fault) -> None:
    # The one import inside a function in regency._api, on purpose: fault injection is a
    # test-only feature, so a proc loads regency.testing only when a test injects a fault.
    from .. import testing

    testing.apply_fault(rt, msg)
