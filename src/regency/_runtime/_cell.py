"""Actor cells: a mailbox and the thread or task that drains it, one message at a time.

A *behavior* object from the API layer supplies what to run: ``handle(call, frame)`` for each
message (``call``: its decoded ``Call`` header; a coroutine for async actors) and control
callables (init, stop) placed in the same mailbox, so ``__init__`` runs before any message
and ``__cleanup__`` after all earlier ones.

* Sync actors get a thread of their own, so a blocking ``.get()`` inside an endpoint is legal:
  the loop that must deliver its reply is elsewhere. While its mailbox is empty, the thread
  reads the connection its last message came on itself (its ``read_here``, the borrowing's
  :meth:`~regency._transport._borrowing.Borrowing.read_here`) and
  runs the calls for it it finds there without a hop through the loop; anything else it
  reads goes back to the loop, in order.
* Async actors run as one task on the proc's loop; ``await`` inside an endpoint does not let
  the next message in (``@concurrent_endpoint`` bodies are spawned as tasks by the behavior).
  The task lets the loop run after every ``_TURN`` messages handled back to back, so a long
  mailbox cannot hold up connecting, writing or reading for the rest of the process.

Flow control (ADR 0012): each cell counts the bytes of the messages in its mailbox. Above
``mailbox_high_water_bytes`` it asks the runtime to stop reading the connection the last
one came on (:meth:`Runtime.backlogged`); once the mailbox is down to half the mark, it lets
the runtime read it again. An actor's ``MailboxLimit`` (ADR 0042) sets its own marks, in
bytes and in messages, or has calls past them refused instead (``refuse``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, Protocol

from .._transport._poller import Waker
from .._wire import Inbound
from .._wire._messages import Call

log = logging.getLogger("regency.cell")

_STOP: Final = object()
_NEVER: Final = 1 << 62  # a mark no mailbox reaches
_TURN: Final = 64  # messages an async cell handles before it lets the loop run


def _size(frame: list[memoryview]) -> int:
    return sum([b.nbytes for b in frame])


class _Backlog:
    """The bytes and count of messages in a mailbox, the connections paused because of
    them, and its limits (``MailboxLimit``; ``mailbox_high_water_bytes`` without one).

    ``added``/``n_added`` change on the loop thread only, ``taken``/``n_taken`` on the
    thread that drains the mailbox only (which counts the calls a sync actor's thread reads
    itself in by taking them back), so neither needs a lock. ``full`` reads both, from
    either thread: two threads taking a call at once may go one over a limit.
    """

    __slots__ = ("added", "cap", "count_cap", "count_high", "count_low", "high", "low", "most",
                 "most_n", "n_added", "n_taken", "paused", "posted", "refuse", "rt", "taken")

    def __init__(self, rt: Any, max_bytes: int = 0, max_messages: int = 0,
                 refuse: Any = None) -> None:
        self.rt = rt
        self.refuse = refuse  # ``when_full="raise"``: ``refuse(call, held)``, else None
        default = rt.mailbox_high if rt is not None else _NEVER
        if refuse is not None:  # ``full`` refuses past these, nothing pauses
            self.high = self.count_high = _NEVER
            self.cap = max_bytes if max_bytes > 0 else default
            self.count_cap = max_messages if max_messages > 0 else _NEVER
        else:  # past these the connection the last message came on is paused
            self.high = max_bytes if max_bytes > 0 else default
            self.count_high = max_messages if max_messages > 0 else _NEVER
            self.cap = self.count_cap = _NEVER
        self.low = self.high // 2
        self.count_low = self.count_high // 2
        self.added = 0
        self.taken = 0
        self.n_added = 0
        self.n_taken = 0
        self.most = 0  # the most bytes the mailbox held (statistics)
        self.most_n = 0  # the most messages it held
        self.paused: list[Any] = []  # connections this mailbox had the runtime pause
        self.posted = False  # a ``resume`` is on its way to the loop

    def add(self, frame: list[memoryview]) -> None:
        """A message went into the mailbox (loop thread)."""
        self.added += _size(frame)
        self.n_added += 1
        held = self.added - self.taken
        if held > self.most:
            self.most = held
        count = self.n_added - self.n_taken
        if count > self.most_n:
            self.most_n = count
        if held > self.high or count > self.count_high:
            conn = self.rt.backlogged()
            if conn is not None:
                self.paused.append(conn)

    def refused(self, call: Call, frame: list[memoryview]) -> bool:
        """Whether ``frame`` goes over the limits: then ``refuse(call, held)`` answers it
        instead of the mailbox (``when_full="raise"``; loop thread)."""
        held = self.full(frame)
        if held:
            self.refuse(call, held)
        return held > 0

    def read_in(self, frame: list[memoryview]) -> None:
        """A message its sync actor's thread read itself went in (that thread): counted as
        taken back, since ``take`` counts it out when it runs."""
        self.taken -= _size(frame)
        self.n_taken -= 1

    def take(self, frame: list[memoryview]) -> bool:
        """A message left the mailbox; whether paused connections may be read again now."""
        self.taken += _size(frame)
        self.n_taken += 1
        return (bool(self.paused) and not self.posted and self.added - self.taken <= self.low
                and self.n_added - self.n_taken <= self.count_low)

    def full(self, frame: list[memoryview]) -> int:
        """For a mailbox that refuses calls past its limits: 0 if ``frame`` may go in (a
        lone message always may), else the messages it holds."""
        count = self.n_added - self.n_taken
        if count <= 0:
            return 0
        if count >= self.count_cap or self.added - self.taken + _size(frame) > self.cap:
            return count
        return 0

    def resume(self) -> None:
        """Let the runtime read again what this mailbox had paused (loop thread)."""
        self.posted = False
        paused, self.paused = self.paused, []
        for conn in paused:
            self.rt.unthrottle(conn)


Limits = tuple[int, int, Any]
"""A mailbox's limits (``MailboxLimit``): (max bytes, max messages; 0 for none, the bytes
then ``mailbox_high_water_bytes``), and ``refuse(call, held)`` for ``when_full="raise"``,
called on the loop thread instead of queueing a call past them, or None to block."""


def _backlog(rt: Any, limits: Limits | None) -> _Backlog:
    if limits is None:
        return _Backlog(rt)
    return _Backlog(rt, limits[0], limits[1], limits[2])


class Behavior(Protocol):
    """What a cell runs; implemented by the API layer."""

    def handle(self, call: Call, frame: list[memoryview]) -> Any:
        """Handle one message (a coroutine for async actors)."""


class SyncCell:
    """A sync actor: a dedicated thread drains a FIFO queue.

    Given the ``runtime``, the thread also reads, while idle, the connection its last message
    came on (when that connection can be borrowed): calls for this actor found there run next,
    in arrival order, without a hop through the loop thread. A frame is taken only when the
    mailbox is empty (checked once the loop can no longer read that connection), so what
    the loop queued from it earlier always runs first.
    """

    def __init__(self, uid: str, behavior: Behavior, context_setup: Callable[[], None],
                 runtime: Any = None, limits: Limits | None = None) -> None:
        self.uid = uid
        self.behavior = behavior
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._setup = context_setup
        self._rt = runtime  # where messages come from: read their connection while idle
        self._source: Any = None  # the connection of the last message
        self._mine: collections.deque[Any] = collections.deque()  # read here, to run next
        self._paused: Any = None  # the source, paused by ``before_reply``
        self._declined = False  # the last read here found a message not for this actor
        self._waker = Waker() if runtime is not None and runtime.read_here.enabled else None
        self.backlog = _backlog(runtime, limits)
        self.thread = threading.Thread(target=self._run, name=f"regency-actor-{uid}", daemon=True)
        self.thread.start()

    def enqueue(self, call: Call, frame: list[memoryview]) -> None:
        """Queue a message (loop thread)."""
        backlog = self.backlog
        if backlog.refuse is not None and backlog.refused(call, frame):
            return
        # counted in before the actor thread can take it out: counted after, a message taken
        # at once could leave its connection throttled with nothing left to take (a hang)
        backlog.add(frame)
        self._queue.put((call, frame))
        waker = self._waker
        if waker is not None:
            source = self._rt.read_here.source
            if source is not None and source.borrowable:
                self._source = source
            if waker.armed:
                waker.wake()

    def control(self, fn: Callable[[], Any]) -> None:
        """Queue ``fn()`` to run on the actor's thread after earlier messages."""
        self._put((None, fn))

    def close(self) -> None:
        """Let the thread end after the queued items."""
        self._put(_STOP)

    def _put(self, item: Any) -> None:
        self._queue.put(item)
        waker = self._waker
        if waker is not None and waker.armed:
            waker.wake()

    def _next(self) -> Any:
        """The next item: read here first, then the mailbox; while both are empty, read the
        connection the last message came on."""
        mine = self._mine
        while not mine:
            source = self._source
            if source is None or not self._queue.empty():
                self._unpause()
                return self._get()
            self._read_idle(source)
        self._unpause()
        item = mine.popleft()
        backlog = self.backlog
        if backlog.refuse is not None:  # counted in by ``_take``
            backlog.take(item[1])
        return item

    def _get(self) -> Any:
        """The next item of the mailbox, counted out of its backlog (actor thread)."""
        item = self._queue.get()
        if type(item) is tuple and item[0] is not None:
            backlog = self.backlog
            if backlog.take(item[1]):
                backlog.posted = True
                self._rt.call_soon(backlog.resume)
        return item

    def before_reply(self) -> None:
        """About to answer a call (actor thread): if the next thing this thread does is
        read the source, pause it now, so that the next call cannot reach the loop first."""
        source = self._source
        if (source is not None and not self._mine and self._queue.empty()
                and source.pause_reads()):
            self._paused = source

    def _unpause(self) -> None:
        paused = self._paused
        if paused is not None:
            self._paused = None
            paused.resume_reads()

    def _read_idle(self, source: Any) -> None:
        waker = self._waker
        assert waker is not None
        paused = self._paused is source
        self._paused = None
        waker.armed = True
        try:
            borrowed = source.read_here(self._take, waker, None, self._has_mail, paused,
                                        self._rt.read_here.spin_now())
        finally:
            waker.armed = False
        if self._declined:
            # the connection brings messages for others too (another actor of this proc):
            # reading it here would route each of them through this thread. Leave it to the
            # loop until a call for this actor comes through the mailbox again (``enqueue``)
            self._declined = False
            if self._source is source:
                self._source = None
            source.end_linger()
        elif not borrowed and self._source is source:
            self._source = None  # closed, or not ours to read: the mailbox it is

    def _has_mail(self) -> bool:
        return not self._queue.empty()

    def _take(self, inbound: Inbound) -> bool:
        """Whether a frame read here is a call for this actor, kept to run next."""
        call, _frame = inbound
        if type(call) is not Call or call.mesh_uid != self.uid or call.fanout:
            self._declined = True
            return False
        if self._rt.cells.get(self.uid) is not self:
            self._declined = True
            return False  # stopped: its tombstone answers, on the loop
        backlog = self.backlog
        if backlog.refuse is not None:
            if backlog.full(_frame):
                self._declined = True
                return False  # full: the loop's ``enqueue`` refuses it
            backlog.read_in(_frame)  # counted until it runs (``_next``)
        self._mine.append(inbound)
        return True

    def _run(self) -> None:
        self._setup()
        get = self._get if self._waker is None else self._next
        handle = self.behavior.handle
        while True:
            item = get()
            if item is _STOP:
                return
            call, payload = item
            try:
                if call is None:
                    payload()
                else:
                    handle(call, payload)
            except BaseException:  # the behavior turns errors into failures itself
                log.exception("regency: internal error in actor %s", self.uid)
            # drop the message before waiting for the next one: its receive buffers go back
            # to the pool (a large payload is otherwise kept alive one message too long)
            del item, call, payload


class AsyncCell:
    """An async actor: one task on the loop drains an asyncio queue."""

    def __init__(
        self,
        uid: str,
        behavior: Behavior,
        loop: asyncio.AbstractEventLoop,
        context_setup: Callable[[], None],
        on_loop: Callable[[], bool],
        runtime: Any = None,
        limits: Limits | None = None,
    ) -> None:
        self.uid = uid
        self.behavior = behavior
        self.loop = loop
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self.backlog = _backlog(runtime, limits)
        self._setup = context_setup
        self._on_loop = on_loop
        self.task = loop.create_task(self._run(), name=f"regency-actor-{uid}")

    def enqueue(self, call: Call, frame: list[memoryview]) -> None:
        """Queue a message (loop thread)."""
        backlog = self.backlog
        if backlog.refuse is not None and backlog.refused(call, frame):
            return
        self._queue.put_nowait((call, frame))
        backlog.add(frame)

    def control(self, fn: Callable[[], Any]) -> None:
        """Queue ``fn()`` (may return an awaitable) after earlier messages; any thread."""
        if self._on_loop():
            self._queue.put_nowait((None, fn))
        else:
            self.loop.call_soon_threadsafe(self._queue.put_nowait, (None, fn))

    def close(self) -> None:
        """Let the task end after the queued items."""
        self.loop.call_soon_threadsafe(self._queue.put_nowait, _STOP)

    async def _run(self) -> None:
        self._setup()
        get = self._queue.get
        handle = self.behavior.handle
        backlog = self.backlog
        turn = 0
        while True:
            turn += 1
            if turn >= _TURN:  # let the loop connect, write and read between messages
                turn = 0
                await asyncio.sleep(0)
            item = await get()
            if item is _STOP:
                return
            call, payload = item
            if call is not None and backlog.take(payload):
                backlog.resume()
            result = None
            try:
                result = payload() if call is None else handle(call, payload)
                if asyncio.iscoroutine(result):
                    await result
            except asyncio.CancelledError:
                raise
            except BaseException:
                log.exception("regency: internal error in actor %s", self.uid)
            del item, call, payload, result  # see SyncCell._run
