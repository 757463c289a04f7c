"""The one exception tree of regency.

::

    Exception
     └── RegencyError                      base of everything regency raises on purpose
          ├── ActorError                    an endpoint raised; carries the remote exception
          ├── DeadlineExceeded (TimeoutError) not answered within its ``deadline()``
          ├── MailboxFull                   the callee's mailbox was full (``MailboxLimit``)
          ├── SupervisionError (RuntimeError) the callee died, failed or was stopped
          ├── MeshStoppedError              the mesh was stopped; it cannot be used again
          ├── TransportError                a connection could not be made or was lost
          │    └── AuthenticationError      the peer did not prove the job secret
          └── InternalError                 a bug in regency: please report it

:class:`MeshFailure` is not an exception: it is the record of a failure, handed to
``__supervise__`` and to ``unhandled_fault_hook``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FAILURE_KINDS",
    "ActorError",
    "AuthenticationError",
    "DeadlineExceeded",
    "InternalError",
    "MailboxFull",
    "MeshFailure",
    "MeshStoppedError",
    "RegencyError",
    "SupervisionError",
    "TransportError",
]


class RegencyError(Exception):
    """Base class of the errors regency raises on purpose."""


class ActorError(RegencyError):
    """An endpoint raised an exception; the actor lives on.

    Attributes:
        exception: the original exception object (unpickled at the caller), or a
            ``RuntimeError`` carrying its text when it could not be transferred.
        message: ``"Actor call <actor>.<endpoint> failed."``
        exception_formatted: the remote traceback, as text.
    """

    def __init__(
        self,
        exception: BaseException,
        message: str = "A remote actor call has failed.",
        exception_formatted: str = "",
    ) -> None:
        self.exception = exception
        self.message = message
        self.exception_formatted = exception_formatted
        super().__init__(exception, message)  # Monarch's ``args``: (exception, message)

    def __str__(self) -> str:
        tb = self.exception_formatted
        header = "Traceback of where the remote call failed (most recent call last):"
        if tb.startswith("Traceback (most recent call last):"):
            tb = header + tb[len("Traceback (most recent call last):") :]
        return f"{self.message}\n{tb}".rstrip() if tb else f"{self.message} {self.exception!r}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActorError, (self.exception, self.message, self.exception_formatted))


#: ``MeshFailure.kind``: the actor's own code failed (``"exception"``: an endpoint or
#: ``__init__`` raised, or it called ``abort()``; ``"spawn"``: its class or arguments could
#: not be loaded in the proc, or the proc's bootstrap failed; ``"unhandled"``: it owns a mesh
#: whose failure its ``__supervise__`` did not handle), or its process did (``"exit"``: the
#: proc exited on its own, with whatever code; ``"signal"``: killed by a signal; ``"oom"``:
#: killed by the kernel's OOM killer; ``"lost"``: its host or its process could not be
#: reached any more).
FAILURE_KINDS = ("exception", "spawn", "unhandled", "exit", "signal", "oom", "lost")


@dataclass(eq=False)
class MeshFailure:
    """What failed, where, and why: the record handed to ``__supervise__``.

    Attributes:
        mesh_name: unique name of the failed mesh (``name-uid``).
        ranks: ranks of the failed members within that mesh.
        coords: their coordinates (one dict per rank).
        actor_class: qualified class name of the actor, if an actor mesh.
        endpoint: the endpoint in flight when it failed, if known.
        host: host name.
        pid: process id of the failed proc, if known.
        cause: one line: the exception, exit code or signal.
        traceback: remote traceback text, when the cause was an exception.
        last_lines: the last lines the proc printed.
        log_path: the file on ``host`` that holds everything the proc printed.
        chain: reports of the failures that led here, oldest first.
        kind: what sort of failure, for code that decides what to do about it (respawn
            after a crash, give up on a bug): one of :data:`FAILURE_KINDS`, ``""`` when
            not known.
    """

    mesh_name: str
    ranks: list[int] = field(default_factory=list)
    coords: list[dict[str, int]] = field(default_factory=list)
    actor_class: str = ""
    endpoint: str | None = None
    host: str = ""
    pid: int | None = None
    cause: str = ""
    traceback: str = ""
    last_lines: list[str] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)
    time: float = field(default_factory=time.time)
    log_path: str = ""
    kind: str = ""

    @property
    def mesh(self) -> tuple[()]:
        """Monarch compatibility: always an empty tuple."""
        return ()

    def report(self) -> str:
        """A readable, multi-line report of the failure."""
        coords = list(self.coords) + [{}] * (len(self.ranks) - len(self.coords))
        where = ", ".join(
            f"rank {r} {c}" if c else f"rank {r}" for r, c in zip(self.ranks, coords)
        ) or "no rank"
        lines = [f"The actor {self._actor_text()} and all its descendants have failed:",
                 f"  {self.cause}", f"mesh {self.mesh_name!r} failed: {where}"]
        if self.actor_class:
            lines.append(f"  actor:    {self.actor_class}")
        if self.endpoint:
            lines.append(f"  endpoint: {self.endpoint}")
        lines.append(f"  host:     {self.host} pid {self.pid}")
        lines.append(f"  cause:    {self.cause}")
        if self.traceback:
            lines.append("  traceback:")
            lines.extend("    " + ln for ln in self.traceback.rstrip().splitlines())
        if self.last_lines:
            n = len(self.last_lines)
            lines.append(f"  last {n} lines printed by the proc:" if n > 1
                         else "  the last line printed by the proc:")
            lines.extend("    | " + ln for ln in self.last_lines)
        if self.log_path:
            lines.append(f"  full output: {self.log_path} (on {self.host})")
        for earlier in self.chain:
            lines.append("This error occurred while handling another failure:")
            lines.extend("    " + ln for ln in earlier.splitlines())
        return "\n".join(lines)

    def __str__(self) -> str:
        """Monarch's form: ``MeshFailure(mesh_name=..., crashed_ranks=[1], event=Supervision
        event: actor <...> failed:\n  <cause>)``."""
        return (f"MeshFailure(mesh_name={self.mesh_name}, crashed_ranks={self.ranks}, "
                f"event=Supervision event: actor {self._actor_text()} failed:\n  {self.cause})")

    def _actor_text(self) -> str:
        """``<module.Class name{'gpus': 1}>``, as Monarch names the failed actor."""
        name = self.mesh_name.rsplit("-", 1)[0]
        where = self.coords[0] if len(self.coords) == 1 else ""
        return f"<{self.actor_class} {name}{where}>" if self.actor_class else name


class SupervisionError(RegencyError, RuntimeError):
    """The callee of a pending or new call failed, died or was stopped.

    Carries the same fields as :class:`MeshFailure` as attributes, plus ``endpoint``.
    """

    def __init__(self, message: str, failure: MeshFailure | None = None,
                 endpoint: str | None = None) -> None:
        super().__init__(message)
        self.failure = failure
        self.endpoint = endpoint or (failure.endpoint if failure else None)
        f = failure
        self.mesh_name = f.mesh_name if f else None
        self.ranks = list(f.ranks) if f else []
        self.coords = list(f.coords) if f else []
        self.actor_class = f.actor_class if f else ""
        self.host = f.host if f else ""
        self.pid = f.pid if f else None
        self.cause = f.cause if f else message
        self.last_lines = list(f.last_lines) if f else []
        self.kind = f.kind if f else ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (SupervisionError, (str(self), self.failure, self.endpoint))


class DeadlineExceeded(RegencyError, TimeoutError):
    """A call was not answered within its deadline (``regency.actor.deadline``; not in
    Monarch). Its future fails with this at the deadline, and the members that had not
    answered stop it, as for ``Future.cancel()``: one still queued is skipped, an async
    endpoint running it is cancelled, a sync one can look at ``context().cancelled``. A
    ``TimeoutError``, so ``except TimeoutError`` catches it with ``get(timeout=...)``'s."""


class MailboxFull(RegencyError):
    """The actor's mailbox was full and its ``MailboxLimit`` says ``when_full="raise"``:
    the call was not queued (the actor lives on; not in Monarch)."""


class MeshStoppedError(SupervisionError):
    """The mesh was stopped; spawning on it or calling it is not possible any more."""


class TransportError(RegencyError):
    """A connection could not be made, or was lost."""


class AuthenticationError(TransportError):
    """The peer did not prove that it knows the job secret (or speaks another version)."""


class InternalError(RegencyError):
    """A bug in regency. Please report it with the traceback."""
