"""Many machines: worker hosts (``run_worker_loop_forever``) and ``attach_to_workers``.

A worker is a host agent listening on tcp. It serves one controller at a time: a controller
*attaches* (proving the job secret in the handshake), then keeps a lease alive with
heartbeats. When the lease lapses (the controller died, froze or lost its link) or the
connection to it breaks, the worker kills that controller's procs and waits for the next.
The controller, in turn, declares a worker lost when its heartbeats go unanswered for
``host_lost_timeout`` seconds, and every proc there fails through supervision, naming the host.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import signal
import socket
import time
import warnings
from typing import Any

import cloudpickle

from .. import config
from .._debug._logs import serve_logs
from .._debug._stacks import serve_dumps
from .._mesh import Shape
from .._runtime import _current
from .._runtime._host_agent import SIGKILL_REAP_S, HostAgent
from .._runtime._runtime import Runtime
from .._runtime._secret import job_secret
from .._transport import Address
from .._wire import _messages as m
from ..errors import TransportError
from . import _dispatch, _terminate
from ._bootstrap import root_context_of
from ._failures import host_lost
from ._kept import KeptMeshes
from ._leases import ask, beat
from ._proc_mesh import HostMesh
from ._process import runtime
from ._state import api_state
from ._worker_addr import dial_address, parse_worker_address

log = logging.getLogger("regency.worker")

__all__ = ["attach_to_workers", "run_worker_loop_forever"]


class WorkerService:
    """The controller-facing side of a worker: attach, heartbeats, lease, shutdown."""

    def __init__(self, rt: Runtime, agent: HostAgent) -> None:
        self.rt = rt
        self.agent = agent
        self.controller: str | None = None
        self.last_heartbeat = 0.0
        self.lease = 5.0
        self.done: asyncio.Future[int] = rt.loop.create_future()
        rt.handle(m.Attach, self._on_attach)
        rt.handle(m.Heartbeat, self._on_heartbeat)
        rt.handle(m.Release, self._on_release)
        rt.peer_lost_hooks.append(self._on_peer_lost)
        self.kept = KeptMeshes(rt, agent, lambda: self.controller)

    def _on_attach(self, msg: m.Attach) -> None:
        who = msg.controller
        if self.controller is not None and self.controller != who:
            self.rt.send_reply(msg.port, None, m.RAW_ERROR, TransportError(
                f"worker {self.rt.address} is busy serving controller {self.controller}"))
            return
        self.controller = who
        self.agent.forward_to = who
        self.lease = float(msg.lease)
        self.last_heartbeat = time.monotonic()
        log.info("serving controller %s", who)
        self.rt.send_reply(msg.port, None, m.OK,
                           {"host": self.rt.hostname, "pid": os.getpid(), **runs_on()})

    def _on_heartbeat(self, msg: m.Heartbeat) -> None:
        if msg.controller == self.controller:
            self.last_heartbeat = time.monotonic()
            self.rt.send_reply(msg.port, None, m.OK, None)

    def _on_release(self, msg: m.Release) -> None:
        # a shutdown is taken when idle too: the lease of the controller that sends it may
        # have lapsed (it was frozen, say), and it still shuts the worker down
        lapsed = msg.exit and self.controller is None
        if msg.controller != self.controller and not lapsed:
            self.rt.send_reply(msg.port, None, m.RAW_ERROR, TransportError(
                f"worker {self.rt.address} serves controller {self.controller}, "
                f"not {msg.controller}"))
            return
        self._detach("released by its controller")
        self.rt.send_reply(msg.port, None, m.OK, None)
        if msg.exit and not self.done.done():
            self.rt.loop.call_later(0.05, self.done.set_result, 0)

    def _on_peer_lost(self, addr: str, exc: BaseException | None) -> None:
        if addr == self.controller:
            self._detach(f"lost the connection to its controller ({exc})")

    def _detach(self, why: str) -> None:
        if self.controller is None:
            return
        spared = self.kept.spared()
        doomed = set(self.agent.procs) - spared
        kept = f", keeping {len(spared)} detached" if spared else ""
        log.warning("%s; killing %d proc(s)%s, ready for the next", why,
                    len(doomed), kept)
        self.agent.kill(doomed)
        self.controller = None
        self.agent.forward_to = ""
        if not spared:
            # what its procs started and left ends with the fork server: a fresh one serves
            # the next controller (not while detached procs, its children, still run)
            self.agent.track(self.agent.renew_zygote(SIGKILL_REAP_S), "renew the fork server")

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM or Ctrl-C: stop every proc here (their ``__cleanup__`` runs), then exit
        (loop): 0 after SIGTERM, 130 after Ctrl-C."""
        if self.done.done():
            return  # already exiting (its controller shut it down)
        name = "Ctrl-C (SIGINT)" if sig == signal.SIGINT else signal.Signals(sig).name
        n = len(self.agent.procs)
        log.warning("received %s; stopping %d proc(s) (their __cleanup__ runs), then "
                    "exiting", name, n)
        code = _terminate.INTERRUPTED if sig == signal.SIGINT else 0
        self.agent.track(self._terminate(name, code), f"stop on {name}")

    async def _terminate(self, name: str, code: int) -> None:
        why = f"stopped because its worker {self.rt.address} received {name}"
        await self.agent.stop_all(why, float(config.get("cleanup_timeout")) + 2.0)
        if not self.done.done():
            self.done.set_result(code)

    async def watch_lease(self) -> None:
        """Detach when the controller stops renewing its lease."""
        while not self.done.done():
            await asyncio.sleep(0.25)
            if self.controller is None:
                continue
            last = max(self.last_heartbeat, self.rt.router.last_activity(self.controller))
            if time.monotonic() - last > self.lease:
                self._detach(f"controller {self.controller} missed its heartbeats ({self.lease}s)")


def run_worker_loop_forever(address: str = "tcp://0.0.0.0:26600",
                            ca: str = "trust_all_connections", advertise: str | None = None,
                            *, private_key: object = None) -> int:
    """Make this process a worker host serving controllers at ``address``, until shut down.

    ``address`` takes Monarch's forms (``tcp://H:P``, ``tcp://*:P``, ``PROC@tcp://H:P``,
    ``tcp://ADVERTISED:P@tcp://BIND:P``; see ``_worker_addr``). The job secret comes from
    ``REGENCY_SECRET`` or ``REGENCY_SECRET_FILE``; with neither, from this user's secret file
    (``~/.config/regency/secret``, made on first use), which a controller of the same user
    reads too. ``advertise`` is the host name or IP other
    machines use to reach procs here (default: the advertised part of ``address``, else this
    machine's address). Returns the exit code once a controller shuts the worker down.
    """
    _check_ca(ca, "run_worker_loop_forever")
    _check_private_key(private_key, "run_worker_loop_forever")
    secret = job_secret("a worker")
    form = parse_worker_address(address)
    addr = form.bind
    advertise = advertise or form.advertise
    rt = Runtime(secret=secret, job="worker", role="worker")
    _current.set_runtime(rt)
    asyncio.set_event_loop(rt.loop)
    agent = HostAgent(rt)
    serve_dumps(rt, agent)  # stack dumps of this machine's procs
    serve_logs(rt)  # the last lines of this machine's procs' log files
    agent.advertise_host = advertise or _advertised_host(addr.host)
    rt.agent = agent
    _dispatch.install(rt)
    service = WorkerService(rt, agent)
    _terminate.install_in_worker(
        lambda sig: rt.loop.call_soon_threadsafe(service.terminate, sig))
    listen = str(Address("tcp", addr.host, addr.port))
    rt.loop.run_until_complete(rt.start(listen))
    rt.host_agent = rt.address
    api_state(rt).root_context = root_context_of(rt)
    agent.start_zygote()
    print(f"regency worker listening on {rt.address}", flush=True)
    try:
        code = rt.loop.run_until_complete(_serve(service))
    finally:
        rt.stopping = True
        agent.shutdown()
        rt.loop.run_until_complete(rt.router.aclose())
    return code


async def _serve(service: WorkerService) -> int:
    watcher = asyncio.get_running_loop().create_task(service.watch_lease())
    try:
        return await service.done
    finally:
        watcher.cancel()


def _advertised_host(bind_host: str) -> str:
    if bind_host not in ("0.0.0.0", "::", ""):
        return bind_host
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _local_ip_towards(host: str) -> str:
    """The IP of this machine on the interface that reaches ``host``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, 9))
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def _check_ca(ca: str, where: str) -> None:
    """Refuse a ``ca`` that would be silently ignored: TLS comes from the configuration."""
    if ca == "trust_all_connections":
        return
    configured = str(config.get("tls_ca") or "")
    if configured and os.path.realpath(ca) == os.path.realpath(configured):
        return
    raise ValueError(
        f"{where}(ca={ca!r}): regency takes TLS from its configuration, not from this "
        "argument: set tls_cert, tls_key and tls_ca (or REGENCY_TLS_CERT, REGENCY_TLS_KEY, "
        "REGENCY_TLS_CA) before the first regency call, with tls_ca naming this file; or "
        "pass ca='trust_all_connections' (the job secret still authenticates every peer)")


def _check_private_key(key: object, where: str) -> None:
    """Refuse a ``private_key`` that would be silently ignored (TLS is configured instead)."""
    if key is None:
        return
    configured = str(config.get("tls_key") or "")
    if configured and isinstance(key, (str, os.PathLike)) and \
            os.path.realpath(key) == os.path.realpath(configured):
        return
    raise ValueError(
        f"{where}(private_key=...): regency takes TLS keys from its configuration: set "
        "tls_cert, tls_key and tls_ca (or REGENCY_TLS_CERT, REGENCY_TLS_KEY, REGENCY_TLS_CA) "
        "before the first regency call, with tls_key naming this file; or leave it None")


def attach_to_workers(workers: list[Any], ca: str = "trust_all_connections",
                      name: str | None = None, *, private_key: object = None) -> HostMesh:
    """A ``HostMesh`` with a ``hosts`` dimension over the given worker addresses.

    Attaches to each worker (they must share the job secret, see ``REGENCY_SECRET``; with none
    configured, workers of the same user share that user's secret file) and keeps
    their leases alive. ``shutdown()`` on the mesh makes the workers exit; ``stop()`` releases
    them for the next controller.

    Raises:
        TransportError: a worker cannot be reached, refuses the secret, or is busy.
    """
    if not workers:
        raise ValueError("attach_to_workers needs at least one worker address")
    _check_ca(ca, "attach_to_workers")
    _check_private_key(private_key, "attach_to_workers")
    workers = [dial_address(w) for w in workers]
    wanted = job_secret("attach_to_workers")
    rt = runtime()
    if rt.secret != wanted:
        raise TransportError("REGENCY_SECRET changed after regency started; set it before "
                             "the first regency call")
    agents = tuple(str(Address.parse(w)) for w in workers)
    first = Address.parse(agents[0])
    advertise = _local_ip_towards(first.host)
    contact = rt.run_sync(lambda: rt.listen_tcp("tcp:0.0.0.0:0", advertise), timeout=10)
    timeout = float(config.get("connect_timeout"))
    differs = rt.run_sync(lambda: _attach_all(rt, agents, contact), timeout=timeout + 5)
    for agent, what in differs.items():
        if what:
            warnings.warn(f"regency: worker {agent} runs {what}: functions and classes "
                          "defined in your script (pickled by value) may not load there; "
                          "use the same Python and cloudpickle on every host",
                          RuntimeWarning, stacklevel=2)
    api = api_state(rt)
    for agent in agents:
        api.heartbeats[agent] = time.monotonic()
    if not api.heartbeat_started:
        api.heartbeat_started = True
        rt.call_soon(_start_heartbeat, rt)
    return HostMesh(Shape.from_sizes(["hosts"], [len(agents)]), agents, owned=True)


def runs_on() -> dict[str, str]:
    """The Python and cloudpickle this process runs (a worker tells its controller)."""
    return {"python": platform.python_version(), "cloudpickle": cloudpickle.__version__}


def what_differs(worker: dict[str, Any]) -> str:
    """What a worker runs that this controller does not, in words ("" when nothing that
    matters: a Python of another minor version, another cloudpickle). A worker of an
    earlier release says nothing of it: nothing is said."""
    mine = runs_on()
    theirs = {k: str(worker[k]) for k in mine if k in worker}
    words = []
    python = theirs.get("python")
    if python is not None and python.split(".")[:2] != mine["python"].split(".")[:2]:
        words.append(f"Python {python} (this controller: {mine['python']})")
    pickler = theirs.get("cloudpickle")
    if pickler is not None and pickler != mine["cloudpickle"]:
        words.append(f"cloudpickle {pickler} (this controller: {mine['cloudpickle']})")
    return " and ".join(words)


async def _attach_all(rt: Runtime, agents: tuple[str, ...], contact: str) -> dict[str, str]:
    """Attach to every worker; what each runs that this controller does not (``""``)."""
    lease = float(config.get("host_lost_timeout"))
    # past the connect deadline, so that a connection that never opened says why
    timeout = float(config.get("connect_timeout")) + 2.0
    differs: dict[str, str] = {}

    async def one(agent: str) -> None:
        try:
            who = await ask(rt, agent, lambda port, me: m.Attach(port, me, lease), timeout)
        except (asyncio.TimeoutError, TimeoutError) as exc:
            why = rt.dead_addrs.get(agent, f"no answer in {timeout:g} s")
            raise TransportError(f"cannot attach to worker {agent}: {why}"
                                 f"{_attach_hint(why)}") from exc
        except TransportError as exc:
            raise TransportError(f"cannot attach to worker {agent}: {exc}"
                                 f"{_attach_hint(str(exc))}") from exc
        api_state(rt).worker_pids[agent] = (str(who["host"]), int(who["pid"]))
        differs[agent] = what_differs(who)

    await asyncio.gather(*(one(a) for a in agents))
    return differs


def _attach_hint(why: str) -> str:
    """What to check when a worker could not be reached at all."""
    if any(word in why.lower() for word in ("refused", "no answer", "cannot reach")):
        return (" (is `regency worker --listen tcp://0.0.0.0:PORT` running at that address, "
                "and reachable from here?)")
    return ""


def _start_heartbeat(rt: Runtime) -> None:
    task = api_state(rt).heartbeat_task = rt.loop.create_task(_heartbeat(rt))
    rt.background.add(task)


async def _heartbeat(rt: Runtime) -> None:
    """Renew every worker's lease; declare a worker lost when it stops answering."""
    period = float(config.get("heartbeat_interval"))
    limit = float(config.get("host_lost_timeout"))
    beats = api_state(rt).heartbeats
    while not rt.stopping:
        await asyncio.sleep(period)
        now = time.monotonic()
        for agent, last in list(beats.items()):
            last = max(last, rt.router.last_activity(agent))
            if now - last > limit:
                del beats[agent]
                host_lost(rt, agent, f"the host {agent} stopped answering for {limit:.1f}s")
                continue
            task = rt.loop.create_task(beat(rt, agent, beats))
            rt.background.add(task)
            task.add_done_callback(rt.background.discard)


