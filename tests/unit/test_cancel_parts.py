"""The parts of ``Future.cancel()`` that need no procs (``_api/_cancel.py``, ADR 0036)."""

from __future__ import annotations

import dataclasses
from typing import Any

from regency._api._cancel import CancelCall, cancel_call
from regency._api._future import completed, failed
from regency._api._waits import RecentPorts


def test_futures_not_of_a_call_are_not_cancelled() -> None:
    done = completed(3)
    assert done.cancel() is False and not done.cancelled()
    assert done.get() == 3
    bad = failed(ValueError("x"))
    assert bad.cancel() is False and not bad.cancelled()


def test_cancel_call_refuses_what_is_not_a_cancellable_call() -> None:
    assert cancel_call(object()) is False


def test_the_cancel_message_has_no_port_field() -> None:
    # an undeliverable system message with a ``port`` is answered there with an error: a
    # cancel's port is the call's, whose future is done already
    assert "port" not in {f.name for f in dataclasses.fields(CancelCall)}


def test_recent_ports_forget_a_discarded_port_and_the_oldest_first() -> None:
    ports = RecentPorts(2)
    ports.add(("a", 1))
    ports.add(("a", 2))
    ports.discard(("a", 1))
    ports.discard(("a", 9))  # absent: nothing happens
    assert ("a", 1) not in ports and ("a", 2) in ports
    ports.add(("a", 3))
    ports.add(("a", 4))
    assert ("a", 2) not in ports and ("a", 3) in ports and ("a", 4) in ports


def test_a_cancel_drops_the_call_held_for_an_actor_not_spawned_yet() -> None:
    from types import SimpleNamespace

    from regency._api._cancel import on_cancel

    mine, other = SimpleNamespace(port=("c", 7)), SimpleNamespace(port=("c", 8))
    rt: Any = SimpleNamespace(cells={}, held={"w": [(mine, []), (other, [])]})
    on_cancel(rt, CancelCall("w", 0, ("c", 7)))
    assert rt.held["w"] == [(other, [])]
    on_cancel(rt, CancelCall("nobody", 0, ("c", 8)))  # nothing held, nothing spawned: no-op
    assert rt.held["w"] == [(other, [])]
