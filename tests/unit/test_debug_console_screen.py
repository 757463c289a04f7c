"""The console's screen: text from the service never lands inside a prompt readline is
drawing, and nothing stays held when ``input()`` ends early (Ctrl-C, end of input)."""

from __future__ import annotations

import io
import threading
import types
from typing import Any

import pytest

from regency._debug import _console
from regency._debug._console import Console

pytestmark = pytest.mark.timeout(30)


class _Watched(threading.Condition):
    """A condition that says when someone starts waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait_for(self, predicate: Any, timeout: float | None = None) -> Any:
        if not predicate():
            self.waiting.set()
        return super().wait_for(predicate, timeout)


@pytest.fixture
def screen_text(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """What the console writes (its module's ``sys.stdout``)."""
    out = io.StringIO()
    monkeypatch.setattr(_console, "sys", types.SimpleNamespace(stdout=out))
    return out


@pytest.fixture
def console(monkeypatch: pytest.MonkeyPatch, screen_text: io.StringIO) -> Console:
    monkeypatch.setattr(_console, "_reads_with_readline", lambda: True)
    monkeypatch.setattr(_console, "_line_buffer", lambda: "typed")
    c = Console(link=None)  # type: ignore[arg-type]  # no link: only the screen is used
    c.prompt_hook = True
    return c


def test_text_that_comes_while_the_prompt_is_drawn_prints_after_it(
    console: Console, monkeypatch: pytest.MonkeyPatch, screen_text: io.StringIO
) -> None:
    screen = console.screen = _Watched()
    reader = threading.Thread(target=console._show, args=("[debug] rank 1 paused\n",))

    def drawing_input(prompt: str) -> str:  # what readline does, one character at a time
        reader.start()
        assert screen.waiting.wait(20), "the text did not wait for the prompt"
        for ch in prompt:
            screen_text.write(ch)
        console.prompt_drawn()  # readline's pre-input hook
        reader.join(20)
        return "c"

    monkeypatch.setattr("builtins.input", drawing_input)
    assert console._input("regency_dbg> ") == "c"
    redrawn = "\r\x1b[K[debug] rank 1 paused\nregency_dbg> typed"
    assert screen_text.getvalue() == "regency_dbg> " + redrawn


@pytest.mark.parametrize("ending", [KeyboardInterrupt, EOFError])
def test_an_input_that_ends_before_the_prompt_is_drawn_holds_nothing(
    console: Console, monkeypatch: pytest.MonkeyPatch, screen_text: io.StringIO,
    ending: type[BaseException],
) -> None:
    def interrupted(prompt: str) -> str:
        raise ending

    monkeypatch.setattr("builtins.input", interrupted)
    with pytest.raises(ending):
        console._input("regency_dbg> ")
    shown = threading.Thread(target=console._show, args=("later\n",))
    shown.start()
    shown.join(20)
    assert not shown.is_alive()
    assert screen_text.getvalue() == "later\n"
    assert console.typing is None
