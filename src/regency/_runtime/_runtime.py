"""The per-process runtime: one event loop, one router, the ports and actors of this process.

Theory of operation
-------------------
Each OS process that takes part in a job (the controller, every proc) has exactly one
``Runtime``. In the controller the loop runs on a daemon thread started by the first regency
call; in a proc it runs on the main thread. Everything that touches sockets or the tables below
runs on the loop thread; other threads hand work over with :meth:`post` (one
``call_soon_threadsafe`` per message, no task per call).

Frames arrive from the router with their header decoded once, by the connection that read
them (``regency._wire._envelope``), and are dispatched by the header's class: a ``Call`` to an
actor cell's mailbox (held back if the actor is not spawned yet), a ``Reply`` to a port
handler, a ``System`` message to the one handler registered for its class
(:meth:`Runtime.handle`). Those handlers are registered by the layers above (host agent,
supervision, API), which keeps this module free of user-facing concepts; what they keep
per runtime hangs off explicit attributes (``agent``, ``api``, ``data_server``, ...).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .. import config
from .._ratelog import RateLimitedLog
from .._transport import Connection
from .._wire import (
    Inbound,
    ProtocolError,
    decode_header,
    decode_inbound,
    encode_reply,
    system_header,
)
from .._wire._messages import (
    OK,
    RAW_ERROR,
    SUPERVISION,
    SYSTEM_KINDS,
    Call,
    PortRef,
    Reply,
    Resolve,
    System,
    SystemMessage,
)
from ._lines import Lines
from ._pickling import dumps, loads
from ._ports import Ports
from ._router import Frame, Router

if TYPE_CHECKING:
    import mmap

    from .._supervision import Verdicts
    from ._host_agent import HostAgent
    from ._output_carry import Pending
    from ._output_fence import Fence
    from ._output_marks import Marks

log = logging.getLogger("regency.runtime")
_rate_log = RateLimitedLog(log)  # lines a peer can cause: a few per key per 10 s

PortHandler = Callable[[Reply, list[memoryview]], None]
SysHandler = Callable[[Any], None]
M = TypeVar("M", bound=SystemMessage)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop where available, else asyncio's default."""
    if os.environ.get("REGENCY_LOOP") == "asyncio":
        return asyncio.new_event_loop()
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()


#: How long an undeliverable call waits for the cause of its target's death before it is
#: answered with the transport's error (supervision usually fails the call first). A call
#: sent after the connection was lost but before the proc's exit was reported waits too: its
#: answer then names the exit (say, SIGTERM), not "connection lost".
UNDELIVERABLE_GRACE = 0.5


class Runtime:
    """Routing, ports and actor cells of one process."""

    def __init__(self, *, secret: bytes, job: str, role: str) -> None:
        self.secret = secret
        self.job = job
        self.role = role  # "controller" or "proc"
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.loop: asyncio.AbstractEventLoop = new_event_loop()
        self.loop_thread_id = 0
        self.router = Router(secret, self._on_inbound, self._on_peer_lost,
                             self._on_undeliverable, decode=decode_inbound)
        self.read_here = self.router.read_here  # the seam to borrowed reads (``_borrow``)
        self.lines: Lines = self.router.lines  # open connections' writers (``_lines``)
        self.address = ""
        self.my_addresses: set[str] = set()  # every name this runtime answers to
        self.bound_address = ""
        # reply ports (``_ports``); the names below are its tables, for those that read them
        self.throttled: set[Any] = set()  # connections paused by flow control (ADR 0012)
        self.port_table = Ports(self.read_here, self.throttled)
        self.port_table.on_throttled = self._on_port_while_throttled
        self.ports: dict[int, PortHandler] = self.port_table.handlers
        self.port_targets = self.port_table.targets  # port -> addrs it waits on
        self._untargeted = self.port_table.untargeted  # ports answered from anywhere
        self.cells: dict[str, Any] = {}
        self.trees: dict[str, tuple[Any, int]] = {}  # mesh uid -> (relay Tree, our rank)
        self.held: dict[str, list[tuple[Call, list[memoryview]]]] = {}
        self._sys_handlers: dict[str, SysHandler] = {}
        # called on the loop with the address of each runtime found gone (mark_dead)
        self.death_listeners: list[Callable[[str], None]] = []
        self.peer_lost_hooks: list[Callable[[str, BaseException | None], None]] = []
        # The refusal of a call whose frame for a proc could not be written; the API layer
        # names the ranks and the mesh (supervision's words) where it owns the mesh.
        self.undeliverable_text: Callable[[str, Call, str], str] = default_undeliverable_text
        self.dead_addrs: dict[str, str] = {}  # addr -> why it is dead
        # dead by a lost connection only, so far: the real cause (an exit) may still come
        self._cause_unknown: set[str] = set()
        self.troubles = 0  # bumped on any death: routes then avoid dead procs
        self.collectors = self.port_table.collectors  # port -> pending call collector
        self.background: set[asyncio.Task[Any]] = set()  # cancelled at shutdown
        self.stopping = False
        # flow control (ADR 0012): connections not read while a mailbox they feed is full
        self.mailbox_high = int(config.get("mailbox_high_water_bytes")) or (1 << 62)
        # -- where this process stands in the job (set by whoever starts the runtime) --------
        self.root = ""  # the root client's address ("" on a worker between controllers)
        self.root_addresses: set[str] = set()  # in a proc: all of them, as it was spawned
        self.host_agent = ""  # the address of this machine's host agent
        self.agent: HostAgent | None = None  # the host agent, in the process that runs it
        self.thread: threading.Thread | None = None  # the controller's runtime thread
        self.proc_uid = "root"  # the proc mesh this process belongs to ("root": the client)
        self.proc_rank = 0  # this proc's rank in that mesh
        self.status_page: mmap.mmap | None = None  # shared with the host agent (see behavior)
        self.bootstrap_error: str | None = None  # a proc whose bootstrap failed: why
        # -- the layers above: their state, one typed object each (set when they install) ---
        self.api: object = None  # regency._api._state.ApiState (see ``api_state``)
        # what supervision refuses now (regency._supervision.Verdicts), published by the API
        # layer's supervisor after each batch of events; None while nothing is refused, so a
        # call checks nothing then. Read without a lock from any thread.
        self.verdicts: Verdicts | None = None
        self.data_server: Any = None  # regency._dataplane._server.DataServer, on first use
        # regency._observe._observer.Observer while the job records (config ``observe``):
        # shown each system message handled here; None otherwise, and then nothing is done
        self.observer: Any = None
        # _loop_spin.LoopSpin in a proc (``loop_spin``): its loop polls a moment after each
        # frame it handles before it sleeps; None elsewhere
        self.loop_spin: Any = None
        # what a reply waits for or sends first while the proc printed since the last one:
        # _output_fence.Fence in a this_host() proc (replies wait for the lines printed
        # first), _output_marks.Marks in a worker's (a mark goes before each to the root)
        self.output_fence: Fence | Marks | None = None

    # -- threads ---------------------------------------------------------------------------
    def on_loop(self) -> bool:
        """Whether the caller runs on this runtime's loop thread."""
        return threading.get_ident() == self.loop_thread_id

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop thread, from any thread."""
        if self.on_loop():
            fn(*args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)

    def post(self, addr: str, frame: Frame) -> None:
        """Send a frame to the runtime at ``addr``, from any thread, in call order.

        Remote frames are written directly by the calling thread (no hop to the loop).
        """
        if addr in self.my_addresses:
            # Deferred, never inline: a handler must not run in the middle of its sender.
            # The copy is made now, so the sender may change its buffers as soon as we return.
            local = _local_copy(frame)
            header = decode_header(local[0])
            # no loop spin after it (``_deliver``): the answer to an in-process frame comes
            # from this process's threads, which the spinning loop would hold the GIL from
            if self.on_loop():
                self.loop.call_soon(self._deliver, (header, local))
            else:
                self.loop.call_soon_threadsafe(self._deliver, (header, local))
        else:
            self.router.send(addr, frame)

    _send = post

    def run_sync(self, coro_fn: Callable[[], Any], timeout: float | None = None) -> Any:
        """Run a coroutine function on the loop from another thread and wait for it."""
        fut = asyncio.run_coroutine_threadsafe(coro_fn(), self.loop)
        return fut.result(timeout)

    # -- ports -------------------------------------------------------------------------------
    def open_port(self, handler: PortHandler, targets: frozenset[str] = frozenset(),
                  any_thread: bool = False) -> int:
        """Register a port; ``targets`` are the addresses whose death should fail it.

        ``any_thread``: ``handler`` may run on whichever thread reads a reply to it (a caller
        borrowing the connection for its own reply, ADR 0010), not only on the loop.
        """
        return self.port_table.open(handler, targets, any_thread)

    def close_port(self, port_id: int) -> None:
        """Forget a port (late messages to it are dropped)."""
        self.port_table.close(port_id)

    def _on_port_while_throttled(self, targets: frozenset[str]) -> None:
        """A port opened while flow control pauses some connection: its reply must not wait
        behind it (any thread)."""
        self.call_soon(self._unthrottle_for, targets)

    # -- flow control (ADR 0012) --------------------------------------------------------------
    def backlogged(self) -> Any:
        """A mailbox is above its high-water mark (loop thread): stop reading the connection
        whose frame is being handled, unless a reply may come on it. Returns the connection
        paused, or None."""
        conn: Any = self.read_here.source
        if conn is None or conn.throttled or conn.closed or not self._may_throttle(conn):
            return None
        self.throttled.add(conn)
        conn.throttle()
        if not self._may_throttle(conn):  # a port opened on another thread meanwhile
            self.unthrottle(conn)
            return None
        return conn

    def _may_throttle(self, conn: Any) -> bool:
        """Whether no open port waits on a reply that could come on ``conn``."""
        if self._untargeted:
            return False
        label = conn.label
        return not any(label in targets for targets in list(self.port_targets.values()))

    def unthrottle(self, conn: Any) -> None:
        """Read ``conn`` again (loop thread)."""
        self.throttled.discard(conn)
        conn.unthrottle()

    def _unthrottle_for(self, targets: frozenset[str]) -> None:
        for conn in list(self.throttled):
            if not targets or conn.label in targets:
                self.unthrottle(conn)

    def send_reply(self, port: PortRef, rank: int | None, status: int, value: Any) -> None:
        """Send ``value`` to a port, from any thread."""
        data, buffers = dumps(value)
        frame = [encode_reply(port[1], rank, status), data, *buffers]
        fence = self.output_fence
        if fence is not None and fence.written != fence.drained:
            # the lines printed before it go first (_output_fence), or its mark (_output_marks)
            pending = _before_send(fence, port[0])
            if pending is not None:
                self._send_in_order(port[0], [_sys_frame(pending.mark), frame])
                fence.sent(pending)
                return
        if not self.lines.send(port[0], frame, False):  # no open connection: the general way
            self.post(port[0], frame)

    def _send_in_order(self, addr: str, frames: list[Frame]) -> None:
        """Send ``frames`` to ``addr`` in this order: an open connection's writer while it
        takes them, the rest the general way (:meth:`post`) after them."""
        for k, frame in enumerate(frames):
            if not self.lines.send(addr, frame, False):
                for later in frames[k:]:
                    self.post(addr, later)
                return

    def send_sys(self, to: str, msg: SystemMessage) -> None:
        """Send a system message to the runtime at ``to``, from any thread."""
        frame = _sys_frame(msg)
        fence = self.output_fence
        if fence is not None and fence.written != fence.drained:
            pending = _before_send(fence, to)  # an actor's failure after its last lines
            if pending is not None:
                self.post(to, _sys_frame(pending.mark))
                fence.sent(pending)
        self.post(to, frame)

    def handle(self, kind: type[M], handler: Callable[[M], None]) -> None:
        """Make ``handler`` the handler of the system messages of class ``kind`` here."""
        if SYSTEM_KINDS.get(kind.KIND) is not kind:
            raise ValueError(f"{kind.__qualname__} is not a registered system-message kind")
        self._sys_handlers[kind.KIND] = handler

    def dispatch(self, msg: SystemMessage) -> None:
        """Handle ``msg`` here as if it had arrived (loop thread)."""
        self._sys_handlers[msg.KIND](msg)

    # -- receiving ---------------------------------------------------------------------------
    def _on_inbound(self, inbound: Inbound) -> None:
        """A frame and its header, decoded by the connection that read it (loop thread)."""
        spin = self.loop_spin
        if spin is not None:
            spin.kick()
        self._deliver(inbound)

    def _deliver(self, inbound: Inbound) -> None:
        """Hand a frame to its port, actor or system handler (loop thread)."""
        header, frame = inbound
        if isinstance(header, Reply):
            handler = self.ports.get(header.port_id)
            if handler is not None:
                handler(header, frame)
        elif isinstance(header, Call):
            self._dispatch_call(header, frame)
        elif isinstance(header, System):
            self._on_sys(header.kind, frame)
        else:
            log.warning("regency: dropping frame with an unknown header %r", header)

    def _dispatch_call(self, call: Call, frame: list[memoryview]) -> None:
        uid = call.mesh_uid
        if call.fanout:  # a relayed cast: forward it down the tree, then keep it if it is ours
            relay = self.trees.get(uid)
            if relay is None:
                self._hold(call, frame)
                return
            tree, me = relay
            hops, mine = tree.relay(me, call.cast, self.dead_addrs)
            for addr in hops:
                self.router.send(addr, frame)
            if not mine:
                return
            kind = call.system_kind
            if kind is not None:  # a system message that travelled the tree, in order
                self._on_sys(kind, frame)
                return
        cell = self.cells.get(uid)
        if cell is not None:
            cell.enqueue(call, frame)
        else:
            self._hold(call, frame)

    def _on_sys(self, kind: str, frame: list[memoryview]) -> None:
        handler = self._sys_handlers.get(kind)
        if handler is None:
            _rate_log.warning("no-handler", "regency: no handler for system message %r", kind)
            return
        try:
            if len(frame) < 2:
                raise ValueError("no payload")
            msg = loads(frame[1], frame[2:])
            if not isinstance(msg, SYSTEM_KINDS[kind]):
                raise TypeError(f"a {kind!r} system message carried {type(msg).__name__}")
        except Exception as exc:  # undecodable: the peer is broken or hostile (issue 19)
            self._undecodable(kind, exc)
            return
        observer = self.observer
        if observer is not None:
            observer.system(kind, msg)
        try:
            handler(msg)
        except Exception:  # a bad message must never take the connection or proc down
            _rate_log.log(logging.ERROR, f"sys:{kind}", "regency: error handling system "
                          "message %r", kind, exc_info=True)

    def _undecodable(self, kind: str, exc: Exception) -> None:
        """A system message whose payload cannot be decoded: close the connection it came
        on (one rate-limited line, by the connection), or log it if it came another way."""
        source = self.router.read_here.source if self.on_loop() else None
        error = ProtocolError(f"undecodable {kind!r} system message: "
                              f"{type(exc).__name__}: {exc}")
        if isinstance(source, Connection) and not source.closed:
            source.fail(error)
        else:
            _rate_log.warning("undecodable", "regency: dropping an %s", error)

    def _hold(self, call: Call, frame: list[memoryview]) -> None:
        """Keep a message for an actor that is not spawned here yet."""
        uid = call.mesh_uid
        held = self.held.setdefault(uid, [])
        held.append((call, frame))
        if len(held) == 1:
            delay = float(config.get("pending_message_timeout"))
            self.loop.call_later(delay, self._expire_held, uid)

    def _expire_held(self, uid: str) -> None:
        for call, _frame in self.held.pop(uid, []):
            port = call.port
            if port is not None:
                wait = config.get("pending_message_timeout")
                msg = f"no actor of mesh {uid!r} was spawned in this proc within {wait}s"
                self.send_reply(port, None, SUPERVISION, (msg, None))

    def add_cell(self, uid: str, cell: Any) -> None:
        """Register an actor cell and hand it the messages that arrived before it."""
        self.cells[uid] = cell
        for call, frame in self.held.pop(uid, []):
            self._dispatch_call(call, frame)

    # -- failures of peers ----------------------------------------------------------------------
    def _on_peer_lost(self, addr: str, exc: BaseException | None) -> None:
        if addr not in self.dead_addrs:
            self.dead_addrs[addr] = f"connection lost: {exc}"
            self._cause_unknown.add(addr)
        self.troubles += 1
        for hook in list(self.peer_lost_hooks):
            hook(addr, exc)

    def _on_undeliverable(self, addr: str, frame: Frame, exc: BaseException) -> None:
        flat = _flat(frame)
        header = decode_header(flat[0])  # one of our own frames: its header is well formed

        def why() -> str:  # the cause of the peer's death, once supervision knows it
            return self.dead_addrs.get(addr) or f"cannot reach {addr}: {exc}"

        if isinstance(header, Call) and header.port is not None:
            port = header.port

            def answer() -> None:
                text = self.undeliverable_text(addr, header, why())
                self.send_reply(port, None, SUPERVISION, (text, None))

            try:
                if self.known_dead(addr):
                    answer()
                else:  # a proc that just died: its cause (say, a signal) is usually ms away
                    self.loop.call_soon_threadsafe(self.loop.call_later, UNDELIVERABLE_GRACE,
                                                   answer)
            except RuntimeError:
                pass  # the loop is closed: this runtime is shutting down, its calls with it
        elif isinstance(header, System):  # a request that waits for an answer gets the error
            try:
                payload = loads(flat[1], flat[2:])
            except Exception:  # noqa: BLE001 - nothing to answer then
                return
            asked: PortRef | None = getattr(payload, "port", None)
            if asked is not None:
                from ..errors import TransportError

                self.send_reply(asked, None, RAW_ERROR, TransportError(
                    f"{header.kind} to {addr} undeliverable: {why()}"))

    def known_dead(self, addr: str) -> bool:
        """Whether ``addr`` is dead with a known cause (an exit), not only by a lost
        connection (whose cause may still come)."""
        return addr in self.dead_addrs and addr not in self._cause_unknown

    def mark_dead(self, addr: str, why: str) -> None:
        """Record that the runtime at ``addr`` is gone (e.g. its proc exited)."""
        self.dead_addrs[addr] = why
        self._cause_unknown.discard(addr)
        self.troubles += 1
        for listener in self.death_listeners:
            try:
                listener(addr)
            except Exception:
                log.exception("regency: error in a death listener for %s", addr)

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self, address: str, identity: str | None = None) -> str:
        """Listen on ``address`` (loop thread); ``identity`` is the name peers know us by."""
        self.loop_thread_id = threading.get_ident()
        bound = await self.router.listen(address, identity)
        self.bound_address = bound
        self.address = self.router.address
        self.my_addresses.update({bound, self.address})
        self.router.resolver = self._resolve
        return self.address

    async def listen_tcp(self, address: str, advertise: str | None = None) -> str:
        """Also accept tcp connections (for peers on other hosts); returns our tcp address.

        ``advertise`` is the host peers should dial when we bind a wildcard address.
        """
        if self.router.tcp_identity:
            return self.router.tcp_identity
        bound = await self.router.listen(address)
        if advertise:
            port = bound.rsplit(":", 1)[1]
            host = f"[{advertise}]" if ":" in advertise else advertise
            self.router.tcp_identity = f"tcp:{host}:{port}"
        self.my_addresses.update({bound, self.router.tcp_identity})
        return self.router.tcp_identity

    @property
    def contact(self) -> str:
        """Where any peer, local or on another host, can reach us (for ports and owners)."""
        return self.router.tcp_identity or self.address

    def reply_address(self, remote: bool) -> str:
        """The address a peer should answer us at (tcp when the peer is on another host)."""
        if remote and self.router.tcp_identity:
            return self.router.tcp_identity
        return self.address

    async def _resolve(self, logical: str) -> str:
        """The physical address of a ``via:AGENT/NAME`` proc, asked of its host agent."""
        agent = logical[len("via:"):].partition("/")[0]
        fut: asyncio.Future[Any] = self.loop.create_future()

        def on_reply(reply: Reply, frame: list[memoryview]) -> None:
            self.close_port(port_id)
            value = loads(frame[1], frame[2:])
            if not fut.done():
                if reply.status == OK:
                    fut.set_result(value)
                else:
                    fut.set_exception(ConnectionError(str(value)))

        port_id = self.open_port(on_reply, frozenset({agent}))
        self.send_sys(agent, Resolve(logical, (self.reply_address(True), port_id)))
        return str(await asyncio.wait_for(fut, float(config.get("spawn_timeout"))))


def _before_send(fence: Fence | Marks, dest: str) -> Pending | None:
    """``fence.before_send(dest)``; whatever goes wrong there, the message still goes."""
    try:
        return fence.before_send(dest)
    except Exception:  # noqa: BLE001 - ordering is given up, never a message
        _rate_log.log(logging.WARNING, "output-order", "regency: could not order a message "
                      "after this proc's output", exc_info=True)
        return None


def _sys_frame(msg: SystemMessage) -> Frame:
    data, buffers = dumps(msg)
    return [system_header(msg.KIND), data, *buffers]


def _local_copy(frame: Frame) -> list[memoryview]:
    """An in-process delivery copies out-of-band buffers, as a trip between processes would:
    the receiver must not share (and mutate) the sender's memory."""
    flat = _flat(frame)
    return [memoryview(b) for b in flat[:2]] + [memoryview(bytearray(b)) for b in flat[2:]]


def default_undeliverable_text(addr: str, call: Call, why: str) -> str:
    """``message undeliverable``, naming the mesh, the endpoint and the proc."""
    return (f"Endpoint call {call.endpoint}() to mesh {call.mesh_uid!r} failed: message "
            f"undeliverable to its proc {addr}: {why}")


def _flat(frame: Frame) -> list[Any]:
    return [b.raw() if isinstance(b, pickle.PickleBuffer) else b for b in frame]
