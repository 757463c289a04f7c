"""``RemoteException`` and the argument-check message (no torch here)."""

from __future__ import annotations

import linecache
import traceback
from collections.abc import Sequence
from types import CodeType

__all__ = ["RULES", "Frames", "NotADim", "RemoteException", "bad_arguments", "format_frames",
           "user_stack"]

#: (code, line) pairs of the controller frames where an op was issued, innermost first.
Frames = tuple[tuple[CodeType, int], ...]

#: The rules an argument of a remote op must follow, by code (the reference's names).
RULES = {
    "LOCAL_TENSOR": "a local torch tensor was passed while a device mesh is active; create "
                    "it under the mesh (torch ops there are remote) or move it with "
                    "no_mesh and a remote() function",
    "WRONG_MESH": "the tensor lives on another device mesh than the active one; activate "
                  "its mesh, or move it with to_mesh()",
    "WRONG_STREAM": "the tensor belongs to another stream than the active one; use it under "
                    "its stream, or borrow it",
    "DROPPED": "the tensor was dropped (drop() or deleted); it can no longer be used",
    "NO_MESH": "a remote tensor was used under no_mesh.activate(); use it outside that "
               "block (on its own mesh) or inside `with mesh.activate():` of its mesh, or "
               "fetch it with fetch_shard()",
    "BORROWED": "the tensor (or a view of it) is borrowed mutably by another stream: it "
                "cannot be used until that borrow is dropped (borrow.drop())",
    "MUTATING_BORROW": "the tensor would be written, but it is read-only while it is "
                       "borrowed: it is lent to another stream, or it is an immutable borrow "
                       "(drop the borrow first, or borrow it with mutable=True)",
}


class NotADim(KeyError, ValueError):
    """A dimension name the mesh does not have: a ``KeyError`` (Monarch's, for
    ``fetch_shard`` and ``reduce``) and a ``ValueError`` (regency's earlier error)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def bad_arguments(where: str, problems: Sequence[tuple[str, ...]]) -> TypeError:
    """The ``TypeError`` for remote-op arguments that break a rule: ``(argument, code)``,
    or ``(argument, code, detail)`` where ``detail`` (e.g. where a borrow was made) follows."""
    lines = [f"Incorrect arguments to regency operation {where}:"]
    for name, code, *detail in problems:
        lines.append(f"  {name}: {code}: {RULES[code]}")
        lines.extend(f"    {d}" for text in detail for d in text.rstrip().splitlines())
    return TypeError("\n".join(lines))


def user_stack(limit: int = 4) -> str:
    """The caller's stack as traceback text, without regency's and torch's own frames
    (where a tensor was dropped, where a borrow was made)."""
    picked = [f for f in traceback.extract_stack()[:-1]
              if "/regency/_" not in f.filename and "/torch/" not in f.filename]
    return "".join(traceback.format_list(picked[-limit:]))


def format_frames(frames: Frames | None) -> str:
    """Controller frames as traceback lines, outermost first."""
    if frames is None:
        return "  (not kept: the op was issued too long before this fetch)\n"
    out = []
    for code, line in reversed(frames):
        out.append(f'  File "{code.co_filename}", line {line}, in {code.co_name}\n')
        text = linecache.getline(code.co_filename, line).strip()
        if text:
            out.append(f"    {text}\n")
    return "".join(out)


class RemoteException(Exception):
    """A remote op failed; raised at the fetch of a value that depends on it.

    Attributes:
        rank: the rank (in the mesh) where it failed.
        seq: the sequence number of the failed op.
        worker_error_string: the worker's traceback.
        controller_frames: where the op was issued on the controller (text).
    """

    def __init__(self, seq: int, rank: int, fn: str, worker_error_string: str,
                 controller_frames: str) -> None:
        self.seq = seq
        self.rank = rank
        self.fn = fn
        self.worker_error_string = worker_error_string
        self.controller_frames = controller_frames
        super().__init__(
            f"A remote function ({fn}) has failed asynchronously on rank {rank}.\n"
            f"Traceback of where the remote function was issued on controller "
            f"(most recent call last):\n{controller_frames}"
            f"Error as reported from worker:\n{worker_error_string}")

    def __reduce__(self) -> tuple[object, ...]:
        return (RemoteException, (self.seq, self.rank, self.fn, self.worker_error_string,
                                  self.controller_frames))
