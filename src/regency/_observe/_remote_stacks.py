"""Stacks for an API served outside the controller (``regency dashboard``, ``regency top``).

The controller's own API dumps stacks in process (``procs.stacks()``'s machinery). A separate
process reading the job's database asks the job's controller instead, the way
``regency stack`` does: it finds the controller of the same job in this machine's discovery
files (``regency._debug._discovery``; they hold its address and key, owner-only), opens an
authenticated link and sends ``StacksAsk`` for one proc; the controller's debug service
collects the dump from the proc's host agent and answers with the text.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from ..errors import TransportError
from ._store import connect_readonly

__all__ = ["StacksUnavailable", "provider_for"]


class StacksUnavailable(LookupError):
    """The job's controller cannot be asked (it ended, or runs on another machine)."""


def _job_id(db_path: str) -> str:
    try:
        db = connect_readonly(db_path)
        try:
            row = db.execute("SELECT value FROM job WHERE key = 'job'").fetchone()
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise StacksUnavailable(f"cannot read the job id from {db_path}: {exc}") from exc
    if row is None:
        raise StacksUnavailable(f"{db_path} names no job yet")
    return str(row[0])


def provider_for(db_path: str, timeout: float = 1.0) -> Callable[[str], str]:
    """``fn(proc_address) -> stacks text`` for the job recorded in ``db_path``."""

    def stacks(addr: str) -> str:
        from .._debug._console import ask_stacks
        from .._debug._discovery import find

        job = _job_id(db_path)
        found = [c for c in find() if c.job == job]
        if not found:
            raise StacksUnavailable(
                f"job {job}'s controller is not running on this machine for this user, so "
                "nobody can ask its procs for their stacks (stacks need the live job; run "
                "this where its controller runs)")
        ctl = found[0]
        try:
            return ask_stacks(ctl.address, ctl.key, [addr], timeout)
        except (OSError, TransportError) as exc:  # LinkClosed, AuthenticationError
            raise StacksUnavailable(f"could not ask job {job}'s controller (pid {ctl.pid}) "
                                    f"for stacks: {exc}") from exc

    return stacks
