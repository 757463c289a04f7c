"""``Channel``, ``Port`` and ``PortReceiver``: explicit reply paths between actors."""

from __future__ import annotations

import collections
import threading
from typing import Any, Generic, TypeVar

from .._runtime._completion import Completion
from .._wire import _messages as m
from ._future import Future
from ._process import runtime
from ._replies import decode, to_exception

__all__ = ["Channel", "Port", "PortReceiver"]

R = TypeVar("R")


class Port(Generic[R]):
    """The sending end of a channel: picklable, usable from any actor or thread.

    ``send`` is fire-and-forget, reliable and ordered. A port handed to an
    ``explicit_response_port`` endpoint by ``call``/``call_one``/``stream`` is once-only.
    """

    return_undeliverable: bool
    """Whether a message this port cannot deliver comes back to the sender as a failure
    (always so in regency: a send to a dead receiver is reported by supervision)."""

    def __init__(self, addr: str, port_id: int, rank: int | None = None,
                 once: bool = False) -> None:
        self._addr = addr
        self._port_id = port_id
        self._rank = rank
        self._once = once
        self._used = False
        self.return_undeliverable = True

    def _check_once(self) -> None:
        if self._once:
            if self._used:
                raise RuntimeError("OncePortRef already used: this port takes one message")
            self._used = True

    def send(self, obj: R) -> None:
        """Send a value to the receiver."""
        self._check_once()
        runtime().send_reply((self._addr, self._port_id), self._rank, m.OK, obj)

    def exception(self, e: BaseException) -> None:
        """Send an error; the receiver (or caller) gets ``e`` itself."""
        self._check_once()
        runtime().send_reply((self._addr, self._port_id), self._rank, m.RAW_ERROR, e)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Port, (self._addr, self._port_id, self._rank, self._once))

    def __repr__(self) -> str:
        return f"<Port {self._port_id}@{self._addr}>"


class PortReceiver(Generic[R]):
    """The receiving end of a channel: ``recv()`` returns a Future of the next value."""

    def __init__(self, once: bool = False, ranked: bool = False) -> None:
        self._lock = threading.Lock()
        self._items: collections.deque[tuple[int | None, int, Any]] = collections.deque()
        self._waiters: collections.deque[tuple[Completion, bool]] = collections.deque()
        self._ranked = ranked
        rt = runtime()
        self.port_id = rt.open_port(self._on_reply)
        self.addr = rt.contact
        self._once = once
        self._asked = [0]  # recv() calls so far, shared with ``ranked()`` views

    def _on_reply(self, reply: m.Reply, frame: list[memoryview]) -> None:
        if self._once:
            runtime().close_port(self.port_id)  # a once port takes one message in total
        item = (reply.rank, reply.status, decode(frame))
        with self._lock:
            if self._waiters:
                waiter, ranked = self._waiters.popleft()
            else:
                self._items.append(item)
                return
        self._complete(waiter, item, ranked)

    @staticmethod
    def _complete(waiter: Completion, item: tuple[int | None, int, Any], ranked: bool) -> None:
        rank, status, value = item
        if status != m.OK:
            waiter.set_exception(to_exception(status, value))
        else:
            waiter.set_result((rank, value) if ranked else value)

    def recv(self) -> Future[R]:
        """A future of the next value (in arrival order)."""
        waiter = Completion(f"a message on port {self.port_id}")
        with self._lock:
            self._asked[0] += 1
            if self._once and self._asked[0] > 1:  # it would wait for ever (Monarch's words)
                waiter.set_exception(ValueError(
                    f"OncePort is already used: port {self.port_id} was opened with "
                    "Channel.open(once=True) and takes one message, which an earlier "
                    "recv() has; open a new channel for another"))
                return Future._from(waiter)
            if not self._items:
                self._waiters.append((waiter, self._ranked))
                return Future._from(waiter)
            item = self._items.popleft()
        self._complete(waiter, item, self._ranked)
        return Future._from(waiter)

    def ranked(self) -> PortReceiver[tuple[int, R]]:
        """A receiver of the same port whose ``recv()`` gives ``(rank, value)`` pairs: the
        rank of the sender within the mesh that sent. Both receivers take from one queue."""
        view: PortReceiver[tuple[int, R]] = object.__new__(PortReceiver)
        view.__dict__.update(self.__dict__)
        view._ranked = True
        return view

    def close(self) -> None:
        """Stop receiving; later messages are dropped."""
        runtime().close_port(self.port_id)


class Channel(Generic[R]):
    """Factory of ``(Port, PortReceiver)`` pairs on the current actor (or the client)."""

    @staticmethod
    def open(once: bool = False) -> tuple[Port[R], PortReceiver[R]]:
        """A new port and its receiver; with ``once=True`` the port takes one message."""
        recv: PortReceiver[R] = PortReceiver(once=once)
        return Port(recv.addr, recv.port_id, None, once), recv

    @staticmethod
    def open_ranked(once: bool = False) -> tuple[Port[R], PortReceiver[tuple[int, R]]]:
        """Like ``open``, but the receiver yields ``(rank, value)`` pairs."""
        recv: PortReceiver[tuple[int, R]] = PortReceiver(once=once, ranked=True)
        return Port(recv.addr, recv.port_id, None, once), recv
