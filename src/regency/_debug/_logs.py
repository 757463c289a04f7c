"""``procs.logs()``: the last lines of each proc's log file, read where the proc runs.

Every line a proc prints is kept in a file on its machine (:mod:`regency._runtime._proclog`),
whatever the terminal showed (``logging_option`` may aggregate or hide lines). The host
agent of each machine answers ``ReadLogs`` with the last lines of the files of the procs
asked for, procs that have exited included (their files stay), so the controller reads
the output of procs on other hosts without logging in there. A respawned rank's earlier
procs are read too. What one answer carries is bounded: the last ``MAX_BYTES`` of a file,
each line cut at ``MAX_LINE`` characters.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .._runtime._proclog import log_path
from .._wire._messages import OK
from ._agents import ProcRef, ask_agents
from ._messages import ReadLogs

if TYPE_CHECKING:
    from .._runtime._runtime import Runtime

__all__ = ["MAX_BYTES", "MAX_LINE", "ProcLog", "ProcLogs", "collect_logs", "serve_logs",
           "tail_lines"]

_BLOCK = 1 << 16
MAX_BYTES = 16 << 20  # read at most this much of the end of a file
MAX_LINE = 64 << 10  # characters of one line sent back (the rest is said, not sent)


@dataclass(frozen=True)
class ProcLog:
    """The last lines one proc printed, as kept in its file on ``host`` at ``path``.

    ``rank`` and ``coords`` are those of the mesh ``logs()`` was called on (a slice counts
    from 0). ``earlier``: the same rank's procs before it was respawned, oldest first.
    """

    mesh: str
    rank: int
    coords: dict[str, int]
    host: str
    path: str
    raw: list[str]  # as in the file: each line after a mark, "! " for stderr, "  " for stdout
    earlier: list[ProcLog] = field(default_factory=list)

    @property
    def lines(self) -> list[str]:
        """The lines, stdout and stderr in the order printed, without their marks."""
        return [line[2:] for line in self.raw]

    @property
    def stderr(self) -> list[str]:
        """The lines printed on stderr."""
        return [line[2:] for line in self.raw if line.startswith("!")]

    def _text(self, note: str = "") -> list[str]:
        head = (f"== {self.mesh} {self.coords}{note}: last {len(self.raw)} lines of "
                f"{self.path} (on {self.host}) ==")
        return [head, *(("! " if line.startswith("!") else "") + line[2:] for line in self.raw)]


class ProcLogs:
    """The last lines of each proc of a mesh (``ProcMesh.logs()``).

    ``logs.of(rank)`` (or ``logs.of(gpus=1)``) gives one proc's lines; iterating gives each
    :class:`ProcLog`; ``str(logs)`` shows them all, one section per proc (a respawned
    rank's earlier procs first), stderr lines marked ``!``. ``missing`` maps the ranks
    whose lines could not be read to why.
    """

    def __init__(self, logs: list[ProcLog], missing: dict[int, str],
                 coords: dict[int, dict[str, int]] | None = None) -> None:
        self._logs = logs
        self.missing = missing
        self._coords = coords or {}  # rank -> coordinates, of every proc asked for

    def __iter__(self) -> Iterator[ProcLog]:
        return iter(self._logs)

    def __len__(self) -> int:
        return len(self._logs)

    def of(self, rank: int | None = None, **coords: int) -> list[str]:
        """The lines of the proc at ``rank`` (of the mesh) or at ``coords``.

        Raises:
            KeyError: no proc there, or its lines could not be read (saying why).
        """
        for log in self._logs:
            if (rank is not None and log.rank == rank) or (coords and all(
                    log.coords.get(k) == v for k, v in coords.items())):
                return log.lines
        where = f"rank {rank}" if rank is not None else f"coordinates {coords}"
        why = self.missing.get(rank) if rank is not None else None
        if why is None and coords:
            why = next((w for r, w in self.missing.items() if all(
                self._coords.get(r, {}).get(k) == v for k, v in coords.items())), None)
        if why is None:  # no such proc in the mesh asked
            ranks = sorted([log.rank for log in self._logs] + list(self.missing))
            why = f"the mesh has no proc there (its ranks: {ranks})"
        raise KeyError(f"no lines of the proc at {where}: {why}")

    def __str__(self) -> str:
        out = []
        for log in self._logs:
            for before in log.earlier:
                out.extend(before._text(" (before a respawn)"))
            out.extend(log._text())
        out.extend(f"== rank {rank}: {why} ==" for rank, why in sorted(self.missing.items()))
        return "\n".join(out)


def tail_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` lines of the file at ``path`` (lines end at ``\\n`` only; none if the
    file does not exist), from its last ``MAX_BYTES`` at most, each cut at ``MAX_LINE``
    characters."""
    if n <= 0:
        return []
    chunks: list[bytes] = []
    newlines = 0
    try:
        with open(path, "rb") as f:
            pos = f.seek(0, os.SEEK_END)
            start = max(pos - MAX_BYTES, 0)
            while pos > start and newlines <= n:
                step = min(_BLOCK, pos - start)
                pos -= step
                f.seek(pos)
                chunk = f.read(step)
                newlines += chunk.count(b"\n")
                chunks.append(chunk)
    except FileNotFoundError:
        return []
    pieces = b"".join(reversed(chunks)).split(b"\n")
    if pos > 0 and pieces:
        pieces.pop(0)  # the start of a line cut by the reads, or by MAX_BYTES
    if pieces and pieces[-1] == b"":
        pieces.pop()  # the file ends with a whole line
    return [_cut(p.decode("utf-8", errors="replace")) for p in pieces[-n:]]


def _cut(line: str) -> str:
    if len(line) <= MAX_LINE:
        return line
    return f"{line[:MAX_LINE]} [... {len(line) - MAX_LINE} more characters]"


# -- the host agent's side -------------------------------------------------------------------------
def serve_logs(rt: Runtime) -> None:
    """Answer ``ReadLogs`` for the procs of this machine (a thread per request); an answer
    is ``{addr: (host, path, lines, error)}``, ``error`` empty unless the file could not be
    read."""

    def one(addr: str, tail: int) -> tuple[str, str, list[str], str]:
        path = log_path(addr)
        try:
            return rt.hostname, str(path), tail_lines(path, tail), ""
        except OSError as exc:
            return rt.hostname, str(path), [], f"cannot read {path}: {exc}"

    def on_read(msg: ReadLogs) -> None:
        def work() -> None:
            rt.send_reply(msg.port, None, OK, {addr: one(addr, msg.tail) for addr in msg.addrs})

        threading.Thread(target=work, name="regency-read-logs", daemon=True).start()

    rt.handle(ReadLogs, on_read)


# -- the controller's side -------------------------------------------------------------------------
def collect_logs(rt: Runtime, procs: list[ProcRef], coords: list[dict[str, int]],
                 earlier: list[list[str]], tail: int, timeout: float) -> ProcLogs:
    """The last ``tail`` lines of each of ``procs`` (``coords``: each one's coordinates;
    ``earlier``: the addresses of each one's earlier incarnations, on the same agent)."""
    asked = list(procs) + [(mesh, rank, old, agent)
                           for (mesh, rank, _, agent), olds in zip(procs, earlier, strict=True)
                           for old in olds]
    answers = ask_agents(rt, asked, lambda addrs, port: ReadLogs(addrs, port, tail), timeout)
    logs, missing = [], {}
    for (mesh, rank, addr, _), where, olds in zip(procs, coords, earlier, strict=True):
        answer = answers.get(addr)
        if answer is None:
            missing[rank] = (f"no answer from its host agent within {timeout:g} s (its host "
                             "is lost, or slow)")
            continue
        host, path, raw, error = answer
        if error:
            missing[rank] = error
            continue
        before = [ProcLog(mesh, rank, where, a[0], a[1], list(a[2]))
                  for a in (answers.get(old) for old in olds) if a is not None and not a[3]]
        logs.append(ProcLog(mesh, rank, where, host, path, list(raw), before))
    return ProcLogs(logs, missing, {rank: where for (_, rank, _, _), where
                                    in zip(procs, coords, strict=True)})
