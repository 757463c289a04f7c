"""The words of supervision: how failed calls, refused calls and refused spawns are explained.

Every reason names the mesh and the ranks and says why, in one line; a failed call's message
adds the endpoint in front (``Endpoint call trainer.step() failed: rank 1 of mesh ...``). A
"why" is the part after the subject, kept per rank so that later refusals repeat it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable

__all__ = [
    "call_failed",
    "proc_failure_kind",
    "proc_lost_cause",
    "process_failed",
    "ranks_text",
    "spawn_refused",
    "subject",
    "why_actor_failed",
    "why_proc_lost",
    "why_connection_lost",
    "why_proc_mesh_stopped",
    "why_ranks_stopped",
    "why_stopped",
    "why_undeliverable",
    "why_unreachable",
]


def ranks_text(ranks: Iterable[int]) -> str:
    """``"rank 3"`` or ``"ranks 0, 1, 5"``."""
    rs = sorted(ranks)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    return "ranks " + ", ".join(map(str, rs))


def subject(uid: str, ranks: Iterable[int]) -> str:
    """``"rank 1 of mesh 'trainer-x1'"``."""
    return f"{ranks_text(ranks)} of mesh {uid!r}"


def call_failed(name: str, endpoint: str, reason: str) -> str:
    """The message of a failed call: ``"Endpoint call <name>.<endpoint>() failed: <reason>"``."""
    return f"Endpoint call {name}.{endpoint}() failed: {reason}"


def actor_gone(name: str, endpoint: str, uid: str, rank: int | None, reason: str,
               failed: bool) -> str:
    """A call refused by an actor that failed or stopped (itself, or was stopped), in
    Monarch's words: ``"Endpoint call s.ping() failed: rank 1 of mesh 's-x1' cannot answer:
    the actor has status stopped: bye"``."""
    who = subject(uid, [rank]) if rank is not None else f"actor mesh {uid!r}"
    why = (f"{who} failed: {reason}" if failed
           else f"{who} cannot answer: the actor has status stopped: {reason}")
    return call_failed(name, endpoint, why)


def why_actor_failed(actor_class: str, cause: str) -> str:
    """The actor raised or otherwise failed (with Monarch's words for it)."""
    who = actor_class or "there"
    return f"failed: The actor {who} and all its descendants have failed: {cause}"


def why_proc_lost(addr: str, cause: str) -> str:
    """The proc hosting the ranks exited; ``cause`` completes "the proc ...".

    Monarch's words come first (``The actor there and all its descendants have failed: the
    process this actor was running on failed: Killed(sig=9)``), so that a ported
    ``pytest.raises(match=...)`` still matches; then which proc and why, in our words.
    """
    return (f"failed: The actor there and all its descendants have failed: the process this "
            f"actor was running on {process_failed(cause)} (lost its proc {addr}: the proc "
            f"{cause})")


def process_failed(cause: str) -> str:
    """Monarch's words for a proc's end: ``failed: Killed(sig=9)``, ``exited with non-zero
    code 3``; other causes (a lost host, say) as they are."""
    for prefix in ("was killed by signal ", "killed by signal "):
        if cause.startswith(prefix):
            return f"failed: Killed(sig={_signal_number(cause[len(prefix):])})"
    if cause.startswith("exited with code ") and not cause.startswith("exited with code 0"):
        return "exited with non-zero code " + cause[len("exited with code "):]
    return cause


def proc_failure_kind(cause: str) -> str:
    """``MeshFailure.kind`` of an actor lost with its proc, from its host agent's words."""
    if "out of memory" in cause:
        return "oom"
    if " (the proc " in cause:  # its host stopped it on its own account: a SIGTERM there
        return "signal"
    if cause.startswith(("killed by signal ", "was killed by signal ")):
        return "signal"
    if cause.startswith("exited with code "):
        return "exit"
    if cause.startswith("could not be spawned"):
        return "spawn"
    return "lost"  # was lost: ..., lost with the fork server


def proc_lost_cause(cause: str) -> str:
    """The cause of an actor lost with its proc: Monarch's words, then ours when they
    differ (``... exited with non-zero code 3 (the proc exited with code 3)``)."""
    said = process_failed(cause)
    extra = "" if said == cause else f" (the proc {cause})"
    return f"the process this actor was running on {said}{extra}"


def _signal_number(text: str) -> str:
    word = text.split()[0] if text.split() else text
    if word.isdigit():
        return word
    try:
        return str(int(signal.Signals[word]))
    except KeyError:
        return word


def why_stopped(reason: str) -> str:
    """The mesh was stopped on purpose."""
    return f"cannot answer: the mesh was stopped ({reason})"


def why_ranks_stopped(reason: str) -> str:
    """These members (a slice of the mesh) were stopped on purpose."""
    return f"cannot answer: they were stopped ({reason})"


def why_connection_lost(addr: str, reason: str) -> str:
    """The connection to the proc just broke: new calls are refused at once."""
    return f"cannot answer: the connection to its proc {addr} was lost ({reason})"


def why_proc_mesh_stopped(addr: str, reason: str) -> str:
    """The proc mesh under the ranks was stopped on purpose."""
    return f"cannot answer: the proc mesh of its proc {addr} was stopped ({reason})"


def why_proc_stopped(addr: str, reason: str) -> str:
    """The proc said it was being stopped on purpose (a mesh spawned elsewhere, say)."""
    return f"cannot answer: its proc {addr} was stopped ({reason})"


def why_undeliverable(addr: str, reason: str) -> str:
    """A call's frame could not be written: the connection to the proc is gone."""
    return f"cannot answer: message undeliverable to its proc {addr}: {reason}"


def why_unreachable(addr: str, reason: str, grace: float) -> str:
    """The connection to the proc broke and no exit status came in time."""
    return (
        f"is unreachable: the connection to its proc {addr} was lost ({reason}) "
        f"and no exit status came within {grace:g} s"
    )


def spawn_refused(uid: str, name: str, bad: dict[int, str]) -> str:
    """Why actors cannot be spawned on a proc mesh some of whose procs (``bad``) are dead."""
    details = "; ".join(f"rank {rank}: {why}" for rank, why in sorted(bad.items()))
    which = ranks_text(bad)
    return (
        f"Cannot spawn new actors on proc mesh {name!r} ({uid}): the procs of {which} are "
        f"dead or unreachable ({details}). Spawn on a slice of the mesh that excludes "
        f"{which}, or on a new proc mesh."
    )
