"""A paused rank: ``breakpoint()`` in a proc opens a pdb whose terminal is the controller.

Every proc installs :func:`breakpoint_hook` as ``sys.breakpointhook`` and replaces
``pdb.set_trace`` (:func:`install`). A breakpoint opens a :class:`Session`: a
:class:`~._link.Link` to the controller's debug service, a ``DebugStart`` naming the actor,
rank and endpoint, and a :class:`RankPdb` whose stdout sends ``DebugOutput`` and whose stdin
sends ``DebugRead`` and blocks until the service answers with a ``DebugInput``. The blocking
read is on the link's own socket, so a pdb that pauses an async actor (and with it the proc's
loop) still gets its input; the caller's future just waits.

Source files the proc cannot read (code defined in the controller's ``__main__``, a
notebook cell, ``exec``'d text) are asked of the controller once per session and put in
``linecache``, where pdb looks.

The behavior tells this module when a call raises and ends (:func:`call_raised`,
:func:`call_ended`), but only while :data:`armed`: from a breakpoint until the end of the
call it paused (or for good in a proc started with the ``debug_post_mortem`` configuration
key), so that nobody pays for the debugger while nobody debugs. A session ends with its
endpoint, and an exception raised after a breakpoint in the same call (or any exception, with
``debug_post_mortem``) pauses the rank post-mortem before the error goes to the caller. The
endpoint a session names is read from the call's context when the breakpoint is hit.
"""

from __future__ import annotations

import linecache
import os
import pdb
import sys
import threading
from types import FrameType, TracebackType
from typing import Any

from .. import config
from .._runtime import _current
from ._link import Link, LinkClosed
from ._messages import (
    DebugEnd,
    DebugInput,
    DebugOutput,
    DebugRead,
    DebugSource,
    DebugSourceAsk,
    DebugStart,
)

__all__ = ["RankPdb", "Session", "armed", "breakpoint_hook", "call_ended", "call_raised",
           "install"]

PROMPT = "(Pdb) "
DYNAMIC = "<dynamic-code>"  # how cloudpickle names code carried by value from __main__
installed = False  # set in procs by :func:`install`
#: Whether the behavior must tell us of calls raising and ending: while some call paused at
#: a breakpoint has not ended yet, or always with ``debug_post_mortem`` (read at install).
armed = False
_post_mortem = False
_holders = 0  # calls (one per thread at most) that hold the hooks armed
_arming = threading.Lock()
_local = threading.local()  # per thread: the open session, whether this call paused and
                            # whether it holds the hooks armed


class _Out:
    """pdb's stdout: text goes to the service; the prompt is sent with the next read."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def write(self, text: str) -> int:
        if text == self.session.pdb.prompt:
            self.session.prompt = text
        elif text:
            self.session.send(DebugOutput(self.session.sid, text))
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered."""


class _In:
    """pdb's stdin: each line is asked of the service (and of the person behind it)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def readline(self) -> str:
        return self.session.read_line()


class RankPdb(pdb.Pdb):
    """pdb with its terminal at the controller; ``regency_continue`` clears and continues."""

    def __init__(self, session: Session) -> None:
        super().__init__(stdin=_In(session), stdout=_Out(session),  # type: ignore[arg-type]
                         nosigint=True, readrc=False)
        self.use_rawinput = False
        self.prompt = PROMPT
        self.session = session
        self.dynamic_path = ""  # the controller's script: where <dynamic-code> comes from

    def canonic(self, filename: str) -> str:
        if filename == DYNAMIC and self.dynamic_path:
            return self.dynamic_path
        return super().canonic(filename)

    def do_regency_continue(self, arg: str) -> bool | None:
        """Clear every breakpoint and continue (the console's ``continue``)."""
        self.clear_all_breaks()
        return self.do_continue(arg)

    def do_continue(self, arg: str) -> bool | None:
        result = super().do_continue(arg)
        if not self.breaks:  # nothing can stop here again: the session is over
            self.session.end("continued")
        return result

    do_c = do_cont = do_continue


class Session:
    """One paused rank's conversation with the controller's debug service."""

    def __init__(self, endpoint: str, post_mortem: bool = False) -> None:
        rt = _current.get()
        if rt is None or not rt.root:
            raise RuntimeError("breakpoint() in a proc that is not part of a job")
        self.link = Link(rt.root, rt.secret, "debug")
        self.sid = self.link.identity
        self.prompt = PROMPT
        self.ended = False
        self.pdb = RankPdb(self)
        actor, rank, coords = _who()
        self.send(DebugStart(self.sid, actor, rank, coords, rt.hostname, os.getpid(),
                             endpoint, post_mortem))

    def send(self, msg: Any) -> None:
        """Send to the service; a closed link ends the session (pdb then sees EOF)."""
        if not self.ended:
            try:
                self.link.send(msg)
            except LinkClosed:
                self.ended = True

    def read_line(self) -> str:
        """Wait for the person's next line ("" when the service is gone: pdb's EOF)."""
        frame = self.pdb.curframe
        function = _qualname(frame) if frame is not None else ""
        line = frame.f_lineno if frame is not None else 0
        self.send(DebugRead(self.sid, self.prompt, function, line or 0))
        while not self.ended:
            try:
                msg = self.link.recv()
            except LinkClosed:
                self.ended = True
                break
            if isinstance(msg, DebugInput):
                return msg.line if msg.line.endswith("\n") else msg.line + "\n"
        return "continue\n"  # no one to ask: let the rank run on

    def fetch_sources(self, frames: list[FrameType]) -> None:
        """Ask the controller for the source of frames whose files this proc cannot read."""
        missing = sorted({f.f_code.co_filename for f in frames
                          if not linecache.getlines(f.f_code.co_filename, f.f_globals)})
        if not missing or self.ended:
            return
        self.send(DebugSourceAsk(self.sid, missing))
        while not self.ended:
            try:
                msg = self.link.recv(timeout=10.0)
            except LinkClosed:
                self.ended = True
                return
            if msg is None:
                return  # the controller did not answer: pdb shows no source
            if isinstance(msg, DebugSource):
                for name, lines in msg.sources.items():
                    if lines:
                        linecache.cache[name] = (sum(map(len, lines)), None, lines, name)
                if msg.main and msg.sources.get(msg.main):
                    self.pdb.dynamic_path = msg.main
                return

    def end(self, why: str) -> None:
        """Tell the service the rank runs on, and close the link."""
        if not self.ended:
            self.send(DebugEnd(self.sid, why))
            self.ended = True
        self.link.close()
        if getattr(_local, "session", None) is self:
            _local.session = None


def _who() -> tuple[str, int, dict[str, int]]:
    """The actor (its mesh name), rank and coordinates this thread runs for."""
    from .._api._context import context

    try:
        inst = context().actor_instance
        point = inst.rank
        return inst.name, int(point.rank), {k: int(v) for k, v in dict(point).items()}
    except Exception:  # noqa: BLE001 - outside any actor: still debuggable
        rt = _current.get()
        return "proc", rt.proc_rank if rt else 0, {}


def _stack(frame: FrameType | None) -> list[FrameType]:
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


def _open(post_mortem: bool = False) -> Session:
    session: Session | None = getattr(_local, "session", None)
    if session is None or session.ended:
        _hold()  # from here to the end of this call, the behavior reports to us
        session = Session(_endpoint_in_flight(), post_mortem)
        _local.session = session
    return session


def _endpoint_in_flight() -> str:
    """``"<Class>.<endpoint>"`` of the call this thread runs, from its context, or ""."""
    from .._api._context import _current as current_context

    ctx = current_context.get(None)
    name = getattr(ctx, "endpoint", "")
    if not name or ctx is None:
        return ""
    return f"{ctx.actor_instance.class_name}.{name}"


def _hold() -> None:
    """Arm the hooks until this thread's call ends (:func:`call_ended`)."""
    global armed, _holders
    if getattr(_local, "holding", False):
        return
    _local.holding = True
    with _arming:
        _holders += 1
        armed = True


def _release() -> None:
    global armed, _holders
    if not getattr(_local, "holding", False):
        return
    _local.holding = False
    with _arming:
        _holders -= 1
        armed = _holders > 0 or _post_mortem


def set_trace(frame: FrameType | None = None) -> None:
    """Pause this rank at ``frame`` (the caller's by default) until the console says go."""
    frame = frame or sys._getframe(1)
    session = _open()
    _local.paused = True
    session.fetch_sources(_stack(frame))
    session.pdb.set_trace(frame)


def breakpoint_hook(*args: Any, **kwargs: Any) -> Any:
    """``sys.breakpointhook`` of every proc (``PYTHONBREAKPOINT=0`` still turns it off)."""
    hook = os.environ.get("PYTHONBREAKPOINT")
    if hook == "0":
        return None
    if hook and hook not in ("pdb.set_trace", "pdb"):
        return sys.__breakpointhook__(*args, **kwargs)
    return set_trace(sys._getframe(1))


def _pdb_set_trace(*, header: str | None = None) -> None:
    session = _open()
    if header is not None:
        session.send(DebugOutput(session.sid, header + "\n"))
    set_trace(sys._getframe(1))


def install() -> None:
    """Make ``breakpoint()`` and ``pdb.set_trace()`` in this proc talk to the controller."""
    global installed, armed, _post_mortem
    sys.breakpointhook = breakpoint_hook
    pdb.set_trace = _pdb_set_trace
    installed = True
    _post_mortem = bool(config.get("debug_post_mortem"))
    armed = armed or _post_mortem


# -- what the behavior tells us (only while ``armed``) ----------------------------------------
def call_raised(exc: BaseException) -> None:
    """The endpoint raised ``exc``: pause post-mortem when this call paused before, or when
    ``debug_post_mortem`` is on."""
    if not (getattr(_local, "paused", False) or _post_mortem):
        return
    tb: TracebackType | None = exc.__traceback__
    if tb is None:
        return
    session = _open(post_mortem=True)
    frames = []
    walk: TracebackType | None = tb
    while walk is not None:
        frames.append(walk.tb_frame)
        walk = walk.tb_next
    session.fetch_sources(frames)
    session.send(DebugOutput(session.sid, f"post-mortem: {type(exc).__name__}: {exc}\n"))
    try:
        session.pdb.reset()
        session.pdb.interaction(None, tb)
    finally:
        session.end("post-mortem over")


def call_ended() -> None:
    """The endpoint finished: the session (if any) ends, and tracing with it; this call no
    longer holds the hooks armed."""
    session: Session | None = getattr(_local, "session", None)
    _local.paused = False
    if session is not None and not session.ended:
        session.pdb.clear_all_breaks()
        sys.settrace(None)
        session.end("the endpoint finished")
    _release()


def _qualname(frame: FrameType) -> str:
    code = frame.f_code
    return str(getattr(code, "co_qualname", code.co_name))
