"""The round trip's compiled tables: the send lines (``_runtime/_lines``) and the reply ports
(``_runtime/_ports``), over real sockets and with a real proc.

``Lines.send`` writes to the open connection's writer or says it could not (the caller then
takes the router's general path); the router publishes a writer only once a connection is
up and withdraws it when the peer is lost. ``Ports`` keeps the books ``Runtime.open_port``
and ``close_port`` kept.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from _loop_pair import LoopPair

from regency._runtime._borrow import ReadHere
from regency._runtime._lines import Lines
from regency._runtime._ports import Ports
from regency.actor import Actor, endpoint, this_host

pytestmark = pytest.mark.timeout(60)
T = 30.0


class Pair(LoopPair):
    """``a`` writes (through ``Lines``), ``b`` receives; both on one loop thread."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = self.connect()

    def keep(self, frame: list[memoryview]) -> bytes:
        return b"|".join(bytes(part) for part in frame)

    def close(self) -> None:
        self.call(lambda: (self.a.close(), self.b.close()))
        self.stop()


@pytest.fixture
def pair() -> Any:
    p = Pair()
    yield p
    p.close()


def test_a_line_writes_to_its_connection_in_order(pair: Pair) -> None:
    lines = Lines()
    lines.writers["unix:@peer"] = pair.a.writer
    assert lines.send("unix:@peer", [b"call", b"args"], True)  # flow control first
    assert lines.send("unix:@peer", [b"reply", b"value"], False)
    pair.wait(lambda: len(pair.got) == 2)
    assert pair.got == [b"call|args", b"reply|value"]


def test_without_a_line_nothing_is_sent(pair: Pair) -> None:
    lines = Lines()
    lines.writers["unix:@peer"] = pair.a.writer
    assert not lines.send("unix:@other", [b"call"], True)
    assert lines.send("unix:@peer", [b"next"], True)
    pair.wait(lambda: len(pair.got) == 1)
    assert pair.got == [b"next"]  # the frame for another address went nowhere


def test_a_closed_connection_is_no_line(pair: Pair) -> None:
    lines = Lines()
    lines.writers["unix:@peer"] = pair.a.writer
    pair.call(pair.a.close)
    assert not lines.send("unix:@peer", [b"late"], False)  # False, not an exception


class Handler:
    def __call__(self, reply: Any, frame: list[memoryview]) -> None:
        pass


def test_ports_open_and_close_keep_the_books() -> None:
    here = ReadHere()
    ports = Ports(here, set())
    one = ports.open(Handler(), frozenset({"unix:@p0"}), True)
    two = ports.open(Handler(), frozenset(), False)
    assert one != two
    assert ports.targets == {one: frozenset({"unix:@p0"})}
    assert ports.untargeted == {two}
    assert here.any_thread(one) and not here.any_thread(two)
    ports.close(one)
    ports.close(two)
    ports.close(two)  # closing twice is harmless
    assert not ports.handlers and not ports.targets and not ports.untargeted
    assert not here.any_thread(one)


def test_a_port_opened_while_a_connection_is_throttled_says_so() -> None:
    throttled: set[Any] = set()
    told: list[frozenset[str]] = []
    ports = Ports(ReadHere(), throttled)
    ports.on_throttled = told.append
    ports.open(Handler(), frozenset({"unix:@p0"}), False)
    assert told == []  # nothing throttled: nothing to say
    throttled.add(object())
    ports.open(Handler(), frozenset({"unix:@p1"}), False)
    assert told == [frozenset({"unix:@p1"})]


class Echo(Actor):
    @endpoint
    def echo(self, x: Any) -> Any:
        return x


def test_the_router_publishes_a_line_once_connected_and_withdraws_it_when_the_peer_is_lost(
) -> None:
    from regency._api._process import runtime

    procs = this_host().spawn_procs(per_host={"procs": 1})
    rt = runtime()
    lost = threading.Event()
    mesh = procs.spawn("echo", Echo)
    addr = mesh._route.addrs[0]

    def on_lost(gone: str, exc: BaseException | None) -> None:
        if gone == addr:
            lost.set()

    rt.peer_lost_hooks.append(on_lost)
    try:
        assert mesh.echo.call_one(7).get(timeout=T) == 7
        assert addr in rt.lines.writers  # the call's frames took the line
        assert mesh.echo.call_one("again").get(timeout=T) == "again"
    finally:
        procs.stop().get(timeout=T)
    try:
        assert lost.wait(T), "the proc's connection was never reported lost"
        assert addr not in rt.lines.writers  # withdrawn before the loss was reported
    finally:
        rt.peer_lost_hooks.remove(on_lost)
