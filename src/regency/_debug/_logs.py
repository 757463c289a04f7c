"""``procs.logs()``: the last lines of each proc's log file, read where the proc runs.

Every line a proc prints is kept in a file on its machine (:mod:`regency._runtime._proclog`),
whatever the terminal showed (``logging_option`` may aggregate or hide lines). The host
agent of each machine answers ``ReadLogs`` with the last lines of the files of the procs
asked for, procs that have exited included (their files stay), so the controller reads
the output of procs on other hosts without logging in there.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .._runtime._proclog import log_path
from .._wire._messages import OK
from ._agents import ProcRef, ask_agents
from ._messages import ReadLogs

if TYPE_CHECKING:
    from .._runtime._runtime import Runtime

__all__ = ["ProcLog", "ProcLogs", "collect_logs", "serve_logs", "tail_lines"]

_BLOCK = 1 << 16


@dataclass(frozen=True)
class ProcLog:
    """The last lines one proc printed, as kept in its file on ``host`` at ``path``."""

    mesh: str
    rank: int
    coords: dict[str, int]
    host: str
    path: str
    raw: list[str]  # as in the file: each line after a mark, "! " for stderr, "  " for stdout

    @property
    def lines(self) -> list[str]:
        """The lines, stdout and stderr in the order printed, without their marks."""
        return [line[2:] for line in self.raw]

    @property
    def stderr(self) -> list[str]:
        """The lines printed on stderr."""
        return [line[2:] for line in self.raw if line.startswith("!")]


class ProcLogs:
    """The last lines of each proc of a mesh (``ProcMesh.logs()``).

    ``logs.of(rank)`` (or ``logs.of(gpus=1)``) gives one proc's lines; iterating gives each
    :class:`ProcLog`; ``str(logs)`` shows them all, one section per proc, stderr lines
    marked ``!``.
    """

    def __init__(self, logs: list[ProcLog], missing: dict[int, str]) -> None:
        self._logs = logs
        self.missing = missing  #: rank -> why its lines could not be read

    def __iter__(self) -> Iterator[ProcLog]:
        return iter(self._logs)

    def __len__(self) -> int:
        return len(self._logs)

    def of(self, rank: int | None = None, **coords: int) -> list[str]:
        """The lines of the proc at ``rank`` (of the mesh) or at ``coords``.

        Raises:
            KeyError: no proc there, or its lines could not be read (``missing`` says why).
        """
        for log in self._logs:
            if (rank is not None and log.rank == rank) or (coords and all(
                    log.coords.get(k) == v for k, v in coords.items())):
                return log.lines
        where = rank if rank is not None else coords
        why = self.missing.get(rank) if rank is not None else None
        raise KeyError(f"no lines of the proc at {where}" + (f": {why}" if why else ""))

    def __str__(self) -> str:
        out = []
        for log in self._logs:
            out.append(f"== {log.mesh} {log.coords}: last {len(log.raw)} lines of "
                       f"{log.path} (on {log.host}) ==")
            out.extend(("! " if line.startswith("!") else "") + line[2:] for line in log.raw)
        out.extend(f"== rank {rank}: {why} ==" for rank, why in sorted(self.missing.items()))
        return "\n".join(out)


def tail_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` lines of the file at ``path`` (none if it does not exist)."""
    if n <= 0:
        return []
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            data, pos = b"", end
            while pos > 0 and data.count(b"\n") <= n:
                step = min(_BLOCK, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
    except FileNotFoundError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[-n:]


# -- the host agent's side -------------------------------------------------------------------------
def serve_logs(rt: Runtime) -> None:
    """Answer ``ReadLogs`` for the procs of this machine (a thread per request)."""

    def on_read(msg: ReadLogs) -> None:
        def work() -> None:
            answer = {addr: (rt.hostname, str(log_path(addr)), tail_lines(log_path(addr),
                                                                          msg.tail))
                      for addr in msg.addrs}
            rt.send_reply(msg.port, None, OK, answer)

        threading.Thread(target=work, name="regency-read-logs", daemon=True).start()

    rt.handle(ReadLogs, on_read)


# -- the controller's side -------------------------------------------------------------------------
def collect_logs(rt: Runtime, procs: list[ProcRef], coords: list[dict[str, int]], tail: int,
                 timeout: float) -> ProcLogs:
    """The last ``tail`` lines of each of ``procs`` (``coords``: each one's coordinates)."""
    answers = ask_agents(rt, procs, lambda addrs, port: ReadLogs(addrs, port, tail), timeout)
    logs, missing = [], {}
    for (mesh, rank, addr, _), where in zip(procs, coords, strict=True):
        answer = answers.get(addr)
        if answer is None:
            missing[rank] = "no answer from its host agent (its host is lost?)"
            continue
        host, path, raw = answer
        logs.append(ProcLog(mesh, rank, where, host, path, list(raw)))
    return ProcLogs(logs, missing)
