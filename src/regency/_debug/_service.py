"""The controller's debug service: the paused ranks, and the console that talks to them.

It lives on the controller's runtime as a set of system-message handlers (loop thread), like
every other service: paused ranks and consoles are peers that connect with the job's key
(:mod:`._link`) and are known by the identity they announced. One console at a time; a new
one takes over. Sessions outlive consoles: ``quit`` (or a console that dies) leaves every
rank paused, and each session keeps the output pdb wrote since its last input, replayed
on ``attach``. A session whose link closes without saying goodbye belonged to a proc that
died; the console is told.

While ranks are paused and no console is connected, the controller says so once on stderr,
with how to attach.
"""

from __future__ import annotations

import atexit
import linecache
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._runtime import _output
from .._runtime._runtime import Runtime
from . import _discovery
from ._commands import COMMANDS, HELP, Command, CommandError, parse
from ._messages import (
    ConsoleBye,
    ConsoleHello,
    ConsoleLine,
    ConsoleSays,
    DebugEnd,
    DebugInput,
    DebugOutput,
    DebugRead,
    DebugSource,
    DebugSourceAsk,
    DebugStart,
    StacksAsk,
    StacksSay,
)

__all__ = ["DebugService", "serve"]

PROMPT = "regency_dbg> "
DYNAMIC = "<dynamic-code>"  # what cloudpickle names code it carried by value
CAST_WAIT_S = 10.0  # a cast gives the prompt back after this long, naming ranks still busy
INTERRUPT = "\x03"  # a console's Ctrl-C: back to the console's prompt
_KEEP = 2000  # chunks of output a session keeps for the next attach
_PDB_WORDS = ["bt", "where", "up", "down", "step", "next", "return", "until", "list", "ll",
              "args", "display", "break", "clear", "tbreak", "jump", "interact", "detach"]


@dataclass
class Paused:
    """One paused rank."""

    start: DebugStart
    function: str = ""
    line: int = 0
    prompt: str | None = None  # set while pdb waits for a line
    log: list[str] = field(default_factory=list)  # pdb's output since the last input

    @property
    def label(self) -> str:
        return f"{self.start.actor} rank {self.start.rank}"


@dataclass
class _Cast:
    waiting: set[str]
    order: list[str]
    busy: list[str]
    handle: Any = None


class DebugService:
    """Owns the sessions of this controller's job (loop thread only)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.sessions: dict[str, Paused] = {}
        self.console: str | None = None
        self.attached: str | None = None
        self.cast: _Cast | None = None
        self.noticed = False
        self.path: Path | None = None
        rt.handle(DebugStart, self._start)
        rt.handle(DebugOutput, self._output)
        rt.handle(DebugRead, self._read)
        rt.handle(DebugEnd, self._end)
        rt.handle(DebugSourceAsk, self._source)
        rt.handle(ConsoleHello, self._hello)
        rt.handle(ConsoleLine, self._line)
        rt.handle(ConsoleBye, self._bye)
        rt.handle(StacksAsk, self._stacks)
        rt.router.close_hooks.append(self._closed)

    # -- sessions ------------------------------------------------------------------------------
    def _start(self, m: DebugStart) -> None:
        s = self.sessions[m.sid] = Paused(m)
        what = "post-mortem" if m.post_mortem else "paused"
        if self.console is not None:
            self._say(f"[debug] {s.label} {what} in {m.endpoint or '?'} ({m.host})\n")
        elif not self.noticed:
            self.noticed = True
            _output.write_whole("stderr", (
                f"regency: {s.label} is {what} in pdb ({m.endpoint or '?'}); attach with "
                "`regency debug` in another terminal (ranks stay paused until you continue "
                "them)\n"))

    def _output(self, m: DebugOutput) -> None:
        s = self.sessions.get(m.sid)
        if s is None:
            return
        s.log.append(m.text)
        del s.log[:-_KEEP]
        if self.attached == m.sid:
            self._say(m.text)

    def _read(self, m: DebugRead) -> None:
        s = self.sessions.get(m.sid)
        if s is None:
            return
        s.prompt, s.function, s.line = m.prompt, m.function, m.line
        if self.attached == m.sid:
            self._say("", m.prompt)
        self._cast_answered(m.sid)

    def _end(self, m: DebugEnd) -> None:
        s = self.sessions.pop(m.sid, None)
        if s is not None:
            self._gone(m.sid, s, m.why)

    def _gone(self, sid: str, s: Paused, why: str) -> None:
        if self.attached == sid:
            self.attached = None
            self._say(f"[debug] {s.label} runs on ({why})\n", PROMPT)  # its output went already
        elif self.console is not None and (self.cast is None or sid not in self.cast.waiting):
            self._say(f"[debug] {s.label} runs on ({why})\n")
        self._cast_answered(sid)
        if not self.sessions:
            self.noticed = False

    def _source(self, m: DebugSourceAsk) -> None:
        main = getattr(sys.modules.get("__main__"), "__file__", None) or ""
        found = {}
        for name in m.filenames:
            found[name] = linecache.getlines(main if name == DYNAMIC and main else name)
        if main and DYNAMIC in found:
            found[main] = found[DYNAMIC]
        self.rt.send_sys(m.sid, DebugSource(m.sid, found, main if DYNAMIC in found else ""))

    def _closed(self, label: str) -> None:
        if label == self.console:
            self.console = self.attached = None
            self.cast = None
            return
        s = self.sessions.pop(label, None)
        if s is not None:
            self._gone(label, s, "its proc is gone: the session ended")
            if self.console is None:
                _output.write_whole("stderr", f"regency: the debug session of {s.label} "
                                    "ended: its proc is gone\n")

    def _stacks(self, m: StacksAsk) -> None:
        from ._stacks import collect, job_procs

        def work() -> None:
            procs = job_procs(self.rt)
            if m.addrs is not None:
                procs = [p for p in procs if p[2] in m.addrs]
            none = "no live procs\n" if m.addrs is None else (
                f"no live proc at {', '.join(m.addrs)} in this job\n")
            text = str(collect(self.rt, procs, m.timeout)) if procs else none
            self.rt.send_sys(m.requester, StacksSay(text))

        threading.Thread(target=work, name="regency-stacks", daemon=True).start()

    # -- the console ---------------------------------------------------------------------------
    def _say(self, text: str, prompt: str | None = None, info: Any = None) -> None:
        if self.console is None:
            return
        names = sorted({s.start.actor for s in self.sessions.values()})
        words = [*COMMANDS, "detach", "ranks(", *names, *_PDB_WORDS]
        self.rt.send_sys(self.console, ConsoleSays(text, prompt, words, info))

    def _hello(self, m: ConsoleHello) -> None:
        if self.console is not None and self.console != m.console:
            self._say("[debug] another console took over\n", None, "bye")
        self.console, self.attached, self.cast = m.console, None, None
        n = len(self.sessions)
        head = f"regency debug: {n} paused rank{'s' if n != 1 else ''}. Type 'help'.\n"
        self._say(head + (self._table() if n else ""), PROMPT)

    def _bye(self, m: ConsoleBye) -> None:
        if m.console == self.console:
            self.console = self.attached = None
            self.cast = None

    def _line(self, m: ConsoleLine) -> None:
        if m.console != self.console:
            return
        if self.attached is not None:
            self._to_attached(m.line)
            return
        if self.cast is not None:
            if m.line == INTERRUPT:
                self._finish_cast()
            return
        if m.line == INTERRUPT:
            self._say("", PROMPT)
            return
        try:
            cmd = parse(m.line)
        except CommandError as exc:
            self._say(f"{exc}\n", PROMPT)
            return
        self._run(cmd)

    def _to_attached(self, line: str) -> None:
        assert self.attached is not None
        s = self.sessions.get(self.attached)
        if s is None or line.strip() == "detach" or line == INTERRUPT:
            label = s.label if s else "the rank"
            self.attached = None
            self._say(f"detached from {label}; it stays paused\n", PROMPT)
            return
        if s.prompt is None:
            self._say("[debug] the rank is running; its prompt comes back when it pauses "
                      "(Ctrl-C detaches)\n")
            return
        self._input(self.attached, s, line)

    def _input(self, sid: str, s: Paused, line: str) -> None:
        s.prompt = None
        s.log = []
        self.rt.send_sys(sid, DebugInput(sid, line))

    def _run(self, cmd: Command) -> None:
        if cmd.name == "":
            self._say("", PROMPT)
        elif cmd.name == "list":
            self._say(self._table() if self.sessions else "no rank is paused\n", PROMPT)
        elif cmd.name == "help":
            self._say(HELP, PROMPT)
        elif cmd.name == "quit":
            n = len(self.sessions)
            self._say(f"bye; {n} rank{'s' if n != 1 else ''} stay paused (run `regency debug` "
                      "again to attach)\n", None, "bye")
            self.console = self.attached = None
        elif cmd.name == "attach":
            self._attach(cmd)
        elif cmd.name == "cast":
            self._cast(cmd)
        elif cmd.name == "continue":
            self._continue()

    def _find(self, actor: str) -> list[tuple[str, Paused]]:
        return [(sid, s) for sid, s in self.sessions.items() if s.start.actor == actor]

    def _what_exists(self) -> str:
        if not self.sessions:
            return "no rank is paused"
        names: dict[str, list[int]] = {}
        for s in self.sessions.values():
            names.setdefault(s.start.actor, []).append(s.start.rank)
        return "paused: " + "; ".join(f"{a} ranks {', '.join(map(str, sorted(r)))}"
                                      for a, r in sorted(names.items()))

    def _attach(self, cmd: Command) -> None:
        found = self._find(cmd.actor)
        hits = [(sid, s) for sid, s in found if s.start.rank == cmd.rank]
        if not hits:
            what = (f"no paused rank {cmd.rank} of {cmd.actor!r}" if found
                    else f"no actor {cmd.actor!r} has a paused rank")
            self._say(f"{what}; {self._what_exists()}\n", PROMPT)
            return
        sid, s = hits[0]
        self.attached = sid
        replay = "".join(s.log)
        head = f"attached to {s.label} ('detach' comes back)\n"
        if replay:
            head += f"<last pdb output of {s.label} follows>\n"
        self._say(head + replay, s.prompt)

    def _cast(self, cmd: Command) -> None:
        assert cmd.spec is not None
        chosen = [(sid, s) for sid, s in self._find(cmd.actor)
                  if cmd.spec.matches(s.start.rank, s.start.coords)]
        if not chosen:
            what = ("no paused rank of {!r} matches" if self._find(cmd.actor)
                    else "no actor {!r} has a paused rank").format(cmd.actor)
            self._say(f"{what}; {self._what_exists()}\n", PROMPT)
            return
        chosen.sort(key=lambda p: p[1].start.rank)
        busy = [sid for sid, s in chosen if s.prompt is None]
        ready = [(sid, s) for sid, s in chosen if s.prompt is not None]
        self.cast = _Cast({sid for sid, _ in ready}, [sid for sid, _ in ready], busy)
        for sid, s in ready:
            self._input(sid, s, cmd.pdb_command)
        self.cast.handle = self.rt.loop.call_later(CAST_WAIT_S, self._finish_cast)
        if not ready:
            self._finish_cast()

    def _cast_answered(self, sid: str) -> None:
        if self.cast is not None and sid in self.cast.waiting:
            self.cast.waiting.discard(sid)
            if not self.cast.waiting:
                self._finish_cast()

    def _finish_cast(self) -> None:
        cast, self.cast = self.cast, None
        if cast is None:
            return
        if cast.handle is not None:
            cast.handle.cancel()
        out = []
        for sid in cast.order:
            s = self.sessions.get(sid)
            if s is None:
                continue
            for line in "".join(s.log).splitlines():
                out.append(f"[{s.start.actor} {s.start.rank}] {line}\n")
        still = [self.sessions[sid].label for sid in cast.waiting if sid in self.sessions]
        still += [self.sessions[sid].label for sid in cast.busy if sid in self.sessions]
        if still:
            out.append(f"[debug] still running (not paused at a prompt): {', '.join(still)}\n")
        self._say("".join(out), PROMPT)

    def _continue(self) -> None:
        ready = [(sid, s) for sid, s in self.sessions.items() if s.prompt is not None]
        for sid, s in ready:
            self._input(sid, s, "regency_continue")
        self._say(f"continuing {len(ready)} paused rank{'s' if len(ready) != 1 else ''}\n",
                  PROMPT)

    def _table(self) -> str:
        rows = [("Actor", "Rank", "Coords", "Host", "Function", "Line")]
        for s in sorted(self.sessions.values(), key=lambda p: (p.start.actor, p.start.rank)):
            coords = ",".join(f"{k}={v}" for k, v in s.start.coords.items()) or "-"
            where = s.function or "(running)"
            if s.start.post_mortem:
                where += " [post-mortem]"
            rows.append((s.start.actor, str(s.start.rank), coords, s.start.host, where,
                         str(s.line or "")))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n"
                       for r in rows)


_current: DebugService | None = None


def current() -> DebugService | None:
    """The debug service of this process's controller runtime, if it has one."""
    return _current


def paused() -> bool:
    """Whether a proc of this controller's job is paused at a breakpoint now."""
    return _current is not None and bool(_current.sessions)


def serve(rt: Runtime) -> DebugService:
    """Host the debug service on the controller's runtime and announce it on this machine."""
    global _current
    service = _current = DebugService(rt)
    try:
        service.path = _discovery.write(rt.job, rt.address, rt.secret, rt.router.tcp_identity)
        atexit.register(_discovery.remove, service.path)
    except OSError:
        pass  # no runtime directory: `regency debug --connect` still works
    return service
