"""What a wait probe concludes at a member (``_api/_waits.py``): which handler a call waits
on, from the member's books; and the bounded record of the calls it started."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from regency._api._waits import RecentPorts, WaitCycle, WaitProbe, _holder, _report

P = ("unix:@caller", 7)  # the port of the call the probe asks about


def books(current: Any = None, bodies: dict[Any, Any] | None = None,
          started: tuple[Any, ...] = ()) -> Any:
    record = RecentPorts()
    for port in started:
        record.add(port)
    return SimpleNamespace(current=current, bodies=bodies or {}, started=record)


def handler(port: Any) -> Any:
    return SimpleNamespace(port=port, waits=[])


def test_the_handler_running_the_call_is_what_it_waits_on() -> None:
    running = handler(P)
    assert _holder(books(current=running, started=(P,)), P) == (running, False)


def test_a_concurrent_body_running_the_call_is_what_it_waits_on() -> None:
    body, serial = handler(P), handler(("unix:@other", 1))
    assert _holder(books(current=serial, bodies={P: body}, started=(P,)), P) == (body, False)


def test_a_call_not_started_waits_behind_the_serial_handler() -> None:
    serial = handler(("unix:@other", 1))
    assert _holder(books(current=serial), P) == (serial, True)


def test_a_call_that_ran_already_or_an_idle_actor_holds_nothing() -> None:
    serial = handler(("unix:@other", 1))
    assert _holder(books(current=serial, started=(P,)), P) == (None, False)
    assert _holder(books(), P) == (None, True)


@given(st.lists(st.integers(0, 500), unique=True), st.integers(1, 8))
def test_started_keeps_the_last_ports_it_was_given(ids: list[int], size: int) -> None:
    """Each call has a port of its own, so each is added once."""
    record = RecentPorts(size)
    for i in ids:
        record.add(("a", i))
    assert [i for i in ids if ("a", i) in record] == ids[-size:]


def test_the_report_names_each_call_and_what_to_do() -> None:
    text = _report("b.pong()", ("a.ping() on rank 0 waits for b.pong() on rank 0",
                                "b.pong() on rank 0 waits for a.echo() on rank 0, which "
                                "cannot start before a.ping() on rank 0 returns"))
    assert text.startswith("b.pong(): deadlock: these endpoint calls wait on each other")
    assert "\n  a.ping() on rank 0 waits for b.pong() on rank 0;\n  b.pong()" in text
    assert "@concurrent_endpoint" in text


def test_no_probe_message_has_a_field_called_port() -> None:
    """A system message with a ``port`` that cannot be delivered is answered at that port
    with an error (``Runtime._on_undeliverable``); a probe's port is somebody's call, which
    a probe to a dead peer must not fail."""
    assert not hasattr(WaitProbe("m", 0, P, (), ()), "port")
    assert not hasattr(WaitCycle("m", 0, P, ()), "port")
