"""``regency debug``: the person's side of the debug service, in a terminal.

It finds the controller (:mod:`._discovery`, or ``--connect``), connects with the job's key
(:mod:`._link`), and then reads lines with readline (history in
``~/.regency_debug_history``, tab completion of commands, actor names and pdb commands) and
sends each to the service, which answers with text and the prompt for the next line. Text
that arrives meanwhile (a rank that paused, a session that ended) is printed as it comes.
Ctrl-C while waiting goes back to ``regency_dbg>``; Ctrl-D or ``quit`` leaves, and every
rank stays paused for the next console.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from ._link import Link, LinkClosed
from ._messages import ConsoleBye, ConsoleHello, ConsoleLine, ConsoleSays
from ._service import INTERRUPT

__all__ = ["Console", "run"]

HISTORY = Path(os.path.expanduser("~/.regency_debug_history"))
_PROMPT_PATIENCE = 1.0  # s text from the service waits at most for readline to draw a prompt


class Console:
    """One console session over an open link."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.prompt: str | None = None
        self.ready = threading.Event()
        self.words: list[str] = []
        self.bye = False
        self.typing: str | None = None  # the prompt, while the person types a line
        self.lost = ""
        # Held while text from the service is written; ``_drawing`` is true while readline
        # draws a prompt (it writes one character at a time, without the interpreter lock),
        # and text waits for it to be over: text never lands inside a prompt.
        # ``prompt_hook`` says whether readline tells us when it has drawn.
        self.screen = threading.Condition()
        self.prompt_hook = False
        self._drawing = False
        self._reader = threading.Thread(target=self._read, name="regency-debug-reader",
                                        daemon=True)

    def _read(self) -> None:
        while True:
            try:
                msg = self.link.recv()
            except LinkClosed:
                self.lost = "the controller has gone (its script ended or was stopped)"
                self.ready.set()
                if self.typing is not None:
                    # out of input(): there is no one to talk to (a real signal wakes readline)
                    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
                return
            if not isinstance(msg, ConsoleSays):
                continue
            self.words = msg.words or self.words
            if msg.text:
                self._show(msg.text)
            if msg.info == "bye":
                self.bye = True
                self.ready.set()
                return
            if msg.prompt is not None:
                self.prompt = msg.prompt
                self.ready.set()

    def _show(self, text: str) -> None:
        """Print text from the service; while a line is being typed, above it."""
        with self.screen:
            # bounded: should readline never call the hook, text shows late, not never
            self.screen.wait_for(lambda: not self._drawing, _PROMPT_PATIENCE)
            typing = self.typing
            if typing is None:
                sys.stdout.write(text)
            else:  # clear the prompt line, print, then show the prompt and what was typed again
                sys.stdout.write("\r\x1b[K" + text + typing + _line_buffer())
            sys.stdout.flush()

    def _input(self, prompt: str) -> str:
        """``input(prompt)``, with text from the service held back while the prompt is drawn.

        Only flags change hands (under ``screen``, which no one holds across ``input()``), so
        a Ctrl-C at any point leaves nothing held: ``finally`` lowers the flag again.
        """
        try:
            with self.screen:
                self.typing = prompt
                self._drawing = self.prompt_hook and _reads_with_readline()
            return input(prompt)
        finally:
            with self.screen:
                self._drawing = False  # Ctrl-C or end of input before readline drew it
                self.typing = None
                self.screen.notify_all()

    def prompt_drawn(self) -> None:
        """readline's pre-input hook: the prompt is on the screen, text may follow."""
        with self.screen:
            self._drawing = False
            self.screen.notify_all()

    def run(self) -> int:
        """Talk until ``quit``, end of input, or the controller going away."""
        _setup_readline(self)
        self._reader.start()
        self.link.send(ConsoleHello(self.link.identity))
        try:
            while True:
                if not self._wait():
                    continue
                if self.bye or self.lost:
                    break
                prompt, self.prompt = self.prompt or "", None
                self.ready.clear()
                try:
                    line = self._input(prompt)
                except EOFError:
                    sys.stdout.write("\n")
                    line = "quit" if prompt.startswith("regency_dbg") else "detach"
                except KeyboardInterrupt:
                    sys.stdout.write("\n")
                    if self.lost:
                        break
                    line = INTERRUPT
                self.link.send(ConsoleLine(self.link.identity, line))
        except LinkClosed:
            self.lost = "the controller has gone"
        finally:
            _save_history()
            if not self.lost:
                try:
                    self.link.send(ConsoleBye(self.link.identity))
                except LinkClosed:
                    pass
            self.link.close()
        if self.lost:
            print(f"regency debug: {self.lost}", file=sys.stderr)
            return 1
        return 0

    def _wait(self) -> bool:
        try:
            self.ready.wait()
            return True
        except KeyboardInterrupt:  # waiting on a rank that runs: go back to the console
            sys.stdout.write("\n")
            self.link.send(ConsoleLine(self.link.identity, INTERRUPT))
            return False


def _setup_readline(console: Console) -> None:
    try:
        import readline
    except ImportError:  # pragma: no cover - not on every platform
        return
    try:
        readline.read_history_file(HISTORY)
    except OSError:
        pass
    readline.set_history_length(1000)

    def complete(text: str, state: int) -> str | None:
        hits = [w if w.endswith("(") else w + " " for w in console.words if w.startswith(text)]
        return hits[state] if state < len(hits) else None

    readline.set_completer(complete)
    readline.set_completer_delims(" \t\n()")
    readline.parse_and_bind("tab: complete")
    if hasattr(readline, "set_pre_input_hook"):  # GNU readline; libedit may lack it
        readline.set_pre_input_hook(console.prompt_drawn)
        console.prompt_hook = True


def _reads_with_readline() -> bool:
    """Whether ``input()`` will go through readline (the process's own terminal)."""
    stdin, stdout = sys.__stdin__, sys.__stdout__
    if stdin is None or stdout is None or sys.stdin is not stdin or sys.stdout is not stdout:
        return False
    try:
        return stdin.isatty() and stdout.isatty()
    except ValueError:  # closed
        return False


def _line_buffer() -> str:
    try:
        import readline

        return readline.get_line_buffer()
    except ImportError:  # pragma: no cover
        return ""


def _save_history() -> None:
    try:
        import readline

        readline.write_history_file(HISTORY)
    except (ImportError, OSError):
        pass


def run(connect: str | None = None, pid: int | None = None) -> int:
    """``regency debug``: find the controller, connect, and run the console."""
    from ..errors import AuthenticationError

    try:
        address, key = _target(connect, pid)
    except LookupError as exc:
        print(f"regency debug: {exc}", file=sys.stderr)
        return 2
    try:
        link = Link(address, key, "console")
    except AuthenticationError as exc:
        print(f"regency debug: {address} refused the connection: {exc}", file=sys.stderr)
        return 3
    except OSError as exc:
        print(f"regency debug: cannot connect to {address}: {exc}", file=sys.stderr)
        return 2
    return Console(link).run()


def stack(connect: str | None = None, pid: int | None = None, timeout: float = 1.0) -> int:
    """``regency stack``: print the grouped stacks of every proc of a running controller."""
    from ..errors import AuthenticationError

    try:
        address, key = _target(connect, pid)
        text = ask_stacks(address, key, None, timeout)
    except LookupError as exc:
        print(f"regency stack: {exc}", file=sys.stderr)
        return 2
    except AuthenticationError as exc:
        print(f"regency stack: {exc}", file=sys.stderr)
        return 3
    except LinkClosed as exc:
        print(f"regency stack: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"regency stack: cannot connect: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


def ask_stacks(address: str, key: bytes, addrs: list[str] | None,
               timeout: float = 1.0) -> str:
    """The grouped stacks of a running controller's procs (all, or those at ``addrs``), as
    text, asked over a link (``regency stack``, and ``regency dashboard``'s stack pane).

    Raises ``AuthenticationError`` when the controller refuses the key, :class:`LinkClosed`
    when it goes or does not answer, ``OSError`` when it cannot be reached."""
    from ..errors import AuthenticationError
    from ._messages import StacksAsk, StacksSay

    try:
        link = Link(address, key, "stack")
    except AuthenticationError as exc:
        raise AuthenticationError(f"{address} refused the connection: {exc}") from exc
    try:
        link.send(StacksAsk(link.identity, timeout, addrs))
        while True:
            msg = link.recv(timeout + 10.0)
            if msg is None:
                raise LinkClosed(f"the controller at {address} did not answer")
            if isinstance(msg, StacksSay):
                return msg.text
    except LinkClosed as exc:
        if "did not answer" in str(exc):
            raise
        raise LinkClosed(f"the controller at {address} has gone") from exc
    finally:
        link.close()


def _target(connect: str | None, pid: int | None) -> tuple[str, bytes]:
    """The address and key to use (see ``regency debug --help``)."""
    from .._runtime._secret import configured_secret
    from . import _discovery

    found = _discovery.find()
    if connect is not None:
        address = connect if connect.startswith(("unix:", "tcp:")) else f"tcp:{connect}"
        if address.startswith("tcp://"):
            address = "tcp:" + address[len("tcp://"):]
        key = configured_secret()
        if key is None:
            mine = [c for c in found if address in (c.address, c.tcp)]
            if not mine:
                raise LookupError(f"no key for {address}: set REGENCY_SECRET (or "
                                  "REGENCY_SECRET_FILE) to the job's secret")
            key = mine[0].key
        return address, key
    if pid is not None:
        found = [c for c in found if c.pid == pid]
        if not found:
            raise LookupError(f"no regency controller with pid {pid} runs here as this user")
    if not found:
        raise LookupError("no regency controller is running on this machine for this user "
                          "(start your script first, or use --connect HOST:PORT)")
    if len(found) > 1:
        lines = "\n  ".join(c.describe() for c in found)
        raise LookupError(f"{len(found)} controllers are running; pick one with --pid:\n  "
                          f"{lines}")
    return found[0].address, found[0].key
