"""``MailboxLimit``: how much an actor's mailbox may hold, and what happens beyond it.

An actor class opts in with a class attribute, ``__mailbox_limit__ = MailboxLimit(...)``
(not in Monarch; ADR 0042). The mailbox is the calls that came and have not started:
the call running, and ``@concurrent_endpoint`` bodies started, are out of it. Two ways to
meet a full one:

* ``when_full="block"`` (flow control): past the limit, the proc stops reading the
  connection the last call came on, until the mailbox is down to half the limit; the
  senders' writes then back up and, past their own high-water mark, make them wait (ADR
  0012; without a limit in bytes, ``mailbox_high_water_bytes`` is the one). The other actors
  of the proc that share the connection wait too; a connection that a reply this proc waits
  for may come on is never paused.
* ``when_full="raise"``: a call that would go over the limit is not queued; its caller's
  future fails at once with ``regency.errors.MailboxFull`` (the actor lives on), and a
  broadcast is dropped and said on the proc's stderr. A lone call is always taken, however
  large; nothing pauses (without ``max_bytes``, ``mailbox_high_water_bytes`` is the limit
  in bytes).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["WHEN_FULL", "MailboxLimit", "limit_of"]

#: What a full mailbox does to the next call.
WHEN_FULL = ("block", "raise")


@dataclass(frozen=True)
class MailboxLimit:
    """The most an actor's mailbox holds: ``max_messages`` calls waiting, ``max_bytes``
    of their payloads (either or both); ``when_full`` says what happens past it: ``"block"``
    the senders wait, ``"raise"`` the call fails with ``MailboxFull``. Set it on the actor
    class as ``__mailbox_limit__``. Not in Monarch."""

    max_messages: int | None = None
    max_bytes: int | None = None
    when_full: Literal["block", "raise"] = "block"

    def __post_init__(self) -> None:
        for name in ("max_messages", "max_bytes"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"MailboxLimit({name}={value!r}): a positive int or None, "
                                f"not {type(value).__name__}")
            if value < 1:
                raise ValueError(f"MailboxLimit({name}={value!r}): a positive int or None")
            object.__setattr__(self, name, int(value))  # a numpy integer, say
        if self.max_messages is None and self.max_bytes is None:
            raise ValueError("MailboxLimit: give max_messages, max_bytes or both")
        if self.when_full not in WHEN_FULL:
            raise ValueError(f"MailboxLimit(when_full={self.when_full!r}): one of "
                             f"{', '.join(map(repr, WHEN_FULL))}")


def limit_of(cls: Any) -> MailboxLimit | None:
    """The ``__mailbox_limit__`` of an actor class; TypeError when it is not a
    ``MailboxLimit``."""
    limit = getattr(cls, "__mailbox_limit__", None)
    if limit is not None and not isinstance(limit, MailboxLimit):
        raise TypeError(f"{cls.__qualname__}.__mailbox_limit__ must be a "
                        f"regency.actor.MailboxLimit, not {type(limit).__name__}")
    return limit
