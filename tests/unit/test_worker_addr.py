"""Monarch's worker address forms, as regency reads them."""

from __future__ import annotations

import pytest

from regency._api._worker_addr import dial_address, parse_worker_address


@pytest.mark.parametrize(("text", "bind", "dial", "advertise"), [
    ("tcp://node1:26600", "tcp:node1:26600", "tcp:node1:26600", "node1"),
    ("tcp:127.0.0.1:5", "tcp:127.0.0.1:5", "tcp:127.0.0.1:5", "127.0.0.1"),
    ("tcp://*:4444", "tcp:0.0.0.0:4444", "tcp:0.0.0.0:4444", None),
    ("service<2MuAHeDjLCEd>@tcp://w:4444", "tcp:w:4444", "tcp:w:4444", "w"),
    ("service@tcp://w:4444", "tcp:w:4444", "tcp:w:4444", "w"),
    ("tcp://w.fqdn:4444@tcp://0.0.0.0:4444", "tcp:0.0.0.0:4444", "tcp:w.fqdn:4444", "w.fqdn"),
    ("service<x>@tcp://w:1@tcp://0.0.0.0:1", "tcp:0.0.0.0:1", "tcp:w:1", "w"),
])
def test_forms(text: str, bind: str, dial: str, advertise: str | None) -> None:
    form = parse_worker_address(text)
    assert (str(form.bind), str(form.dial), form.advertise) == (bind, dial, advertise)
    assert dial_address(text) == dial


@pytest.mark.parametrize(("text", "why"), [
    ("ipc://some_name", "ipc:// is not served"),
    ("inproc://3423", "inproc:// is not served"),
    ("metatls://w:1", "TLS comes from its configuration"),
    ("tcp://w", "needs a port"),
    ("", "non-empty"),
])
def test_unserved_forms_say_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_worker_address(text)


def test_dial_address_resolves_futures() -> None:
    class Done:
        def get(self) -> str:
            return "tcp://h:2"

    assert dial_address(Done()) == "tcp:h:2"
    with pytest.raises(TypeError, match="address string or a Future"):
        dial_address(3)
