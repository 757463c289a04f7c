"""The debug service's system messages (registered in the one registry, ADR 0011).

Between a paused rank's pdb (over its :class:`~._link.Link`) and the controller's service,
every message names its session (``sid``). Between a console and the service, the console
sends lines and the service answers with text and the prompt to show next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._wire._messages import SystemMessage, system_message

__all__ = [
    "ConsoleBye",
    "ConsoleHello",
    "ConsoleLine",
    "ConsoleSays",
    "DebugEnd",
    "DebugInput",
    "DebugOutput",
    "DebugRead",
    "DebugSource",
    "DebugSourceAsk",
    "DebugStart",
    "DumpStacks",
    "ReadLogs",
    "StacksAsk",
    "StacksSay",
]


# -- a paused rank -> the service ---------------------------------------------------------------
@system_message("debug_start")
@dataclass(slots=True)
class DebugStart(SystemMessage):
    """A rank paused in pdb: a new session."""

    sid: str
    actor: str  # the actor's mesh name (what ``attach`` names)
    rank: int  # its rank in that mesh
    coords: dict[str, int]
    host: str
    pid: int
    endpoint: str
    post_mortem: bool


@system_message("debug_output")
@dataclass(slots=True)
class DebugOutput(SystemMessage):
    """Text pdb wrote."""

    sid: str
    text: str


@system_message("debug_read")
@dataclass(slots=True)
class DebugRead(SystemMessage):
    """Pdb waits for a line; ``function`` and ``line`` say where the rank stands."""

    sid: str
    prompt: str
    function: str
    line: int


@system_message("debug_end")
@dataclass(slots=True)
class DebugEnd(SystemMessage):
    """The session is over (the rank runs on, or the endpoint finished)."""

    sid: str
    why: str


@system_message("debug_source_ask")
@dataclass(slots=True)
class DebugSourceAsk(SystemMessage):
    """The rank cannot read these source files: the controller may know them."""

    sid: str
    filenames: list[str]


# -- the service -> a paused rank ---------------------------------------------------------------
@system_message("debug_input")
@dataclass(slots=True)
class DebugInput(SystemMessage):
    """A line for pdb."""

    sid: str
    line: str


@system_message("debug_source")
@dataclass(slots=True)
class DebugSource(SystemMessage):
    """Source lines the controller has (``linecache``) for the files asked about.

    ``main`` is the path of the controller's ``__main__`` script: code that cloudpickle
    carried by value is named ``<dynamic-code>`` in the proc, and comes from there."""

    sid: str
    sources: dict[str, list[str]]
    main: str = ""


# -- a console <-> the service ------------------------------------------------------------------
@system_message("console_hello")
@dataclass(slots=True)
class ConsoleHello(SystemMessage):
    """A console connected; it takes over from any other."""

    console: str


@system_message("console_line")
@dataclass(slots=True)
class ConsoleLine(SystemMessage):
    """A line the person typed."""

    console: str
    line: str


@system_message("console_bye")
@dataclass(slots=True)
class ConsoleBye(SystemMessage):
    """The console quits; every session stays paused."""

    console: str


@system_message("console_says")
@dataclass(slots=True)
class ConsoleSays(SystemMessage):
    """Text for the console; ``prompt``, when set, means: read the next line with it.

    ``words`` are what completion offers (commands, actor names, pdb commands)."""

    text: str
    prompt: str | None
    words: list[str]
    info: Any = None


# -- stack dumps ----------------------------------------------------------------------------------
@system_message("dump_stacks")
@dataclass(slots=True)
class DumpStacks(SystemMessage):
    """To a host agent: dump the Python stacks of these procs; answer ``{addr: text}``."""

    addrs: list[str]
    port: tuple[str, int]
    timeout: float


# -- log tails ------------------------------------------------------------------------------------
@system_message("read_logs")
@dataclass(slots=True)
class ReadLogs(SystemMessage):
    """To a host agent: the last ``tail`` lines of these procs' log files; answer
    ``{addr: (path, lines)}`` (the lines as in the file: ``"! "`` marks stderr)."""

    addrs: list[str]
    port: tuple[str, int]
    tail: int


@system_message("stacks_ask")
@dataclass(slots=True)
class StacksAsk(SystemMessage):
    """From ``regency stack`` or ``regency dashboard`` (over a link): the stacks of every
    proc of the job, or of the procs at ``addrs``."""

    requester: str
    timeout: float
    addrs: list[str] | None = None


@system_message("stacks_say")
@dataclass(slots=True)
class StacksSay(SystemMessage):
    """The answer to :class:`StacksAsk`: the grouped stacks, as text."""

    text: str
