"""A signal that arrives while the main thread runs compiled code still ends its wait.

The hot path is compiled (ADR 0031), and compiled code never passes the interpreter's check
for pending signal handlers: a Ctrl-C that came during a spin, just before the thread
blocks, used to wait for the poll to return (regency._transport._checkpoint). These tests
send a signal to the main thread while it waits and expect the handler's exception out of
the wait itself; a regression shows as a wait that never ends (the test's timeout).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator

import pytest

from regency._runtime._completion import Completion
from regency._transport._poller import Waker

pytestmark = pytest.mark.timeout(120)
NEVER = 600.0  # a wait that only the signal can end within the test's timeout


class Interrupted(Exception):
    pass


@pytest.fixture
def on_signal() -> Iterator[None]:
    def handler(sig: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


def _signal_main_once(started: threading.Event) -> threading.Thread:
    main = threading.main_thread().ident
    assert main is not None

    def send() -> None:
        started.wait()
        signal.pthread_kill(main, signal.SIGUSR1)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def _interrupted(wait: Callable[[], object]) -> None:
    assert threading.current_thread() is threading.main_thread()
    started = threading.Event()
    sender = _signal_main_once(started)
    with pytest.raises(Interrupted):
        started.set()
        wait()
    sender.join()


def test_a_signal_during_a_spin_ends_the_sleep_after_it(on_signal: None) -> None:
    r, w = os.pipe()
    waker = Waker()
    try:
        # most signals land in the spin (compiled code, no check); the sleep after it must
        # still let the handler run
        _interrupted(lambda: waker.wait(r, NEVER, spin=1.0))
    finally:
        waker.close()
        os.close(r)
        os.close(w)


def test_a_signal_ends_a_sleep_without_spin(on_signal: None) -> None:
    r, w = os.pipe()
    waker = Waker()
    try:
        _interrupted(lambda: waker.wait(r, NEVER))
    finally:
        waker.close()
        os.close(r)
        os.close(w)


def test_a_signal_ends_a_plain_wait_on_a_completion(on_signal: None) -> None:
    _interrupted(lambda: Completion().wait_plain(NEVER))


def test_the_main_thread_s_sliced_waits_keep_their_timeouts_and_results() -> None:
    r, w = os.pipe()
    waker = Waker()
    try:
        assert waker.wait(r, 0.05) is False  # shorter than a slice
        assert waker.wait(r, 0.45) is False  # over several slices
        os.write(w, b"x")
        assert waker.wait(r, NEVER) is True
    finally:
        waker.close()
        os.close(r)
        os.close(w)
    c = Completion()
    assert c.wait_plain(0.45) is False
    threading.Timer(0.0, c.set_result, (7,)).start()
    assert c.wait_plain(NEVER) is True and c.outcome() == 7
