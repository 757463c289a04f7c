"""Service proc ids: Monarch's per-host identities, as labels on worker addresses.

Monarch gives each worker host a ``service<...>`` proc id so that two spellings of one host's
address still name one host; role-level launchers pass the ids of all hosts in one JSON list
(``SERVICE_PROC_IDS_ENV``) and each host picks its own by rank (``SERVICE_PROC_RANK_ENV``).
regency names a host by the address it is dialled at, so an id is only a label: a
``PROC_ID@tcp://host:port`` address (``service_proc_addr``) is accepted everywhere a worker
address is (``attach_to_workers``, ``run_worker_loop_forever``) and the id part is dropped.
These helpers make, carry and read such ids so that launch scripts written for Monarch run.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Sequence

__all__ = ["SERVICE_PROC_IDS_ENV", "SERVICE_PROC_RANK_ENV", "deserialize_service_proc_ids",
           "new_service_proc_id", "ranked_service_proc_id_from_env",
           "serialize_service_proc_ids", "service_proc_addr", "service_proc_addrs"]

SERVICE_PROC_IDS_ENV = "REGENCY_SERVICE_PROC_IDS"
"""The environment variable holding every host's service proc id (a JSON list)."""
SERVICE_PROC_RANK_ENV = "REGENCY_SERVICE_PROC_RANK"
"""The environment variable holding this host's index into that list."""

_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*<[A-Za-z0-9_-]+>$")
_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def new_service_proc_id() -> str:
    """A fresh id for a worker host, such as ``service<2MuAHeDjLCEd>``."""
    return "service<" + "".join(secrets.choice(_ALPHABET) for _ in range(12)) + ">"


def _check(proc_id: str) -> str:
    if not isinstance(proc_id, str) or not _ID.match(proc_id):
        raise ValueError(f"{proc_id!r} is not a service proc id (expected NAME<ID>, e.g. "
                         f"{new_service_proc_id()})")
    return proc_id


def serialize_service_proc_ids(proc_ids: Sequence[str]) -> str:
    """The ids as one JSON list, for ``SERVICE_PROC_IDS_ENV``."""
    return json.dumps([_check(str(p)) for p in proc_ids])


def deserialize_service_proc_ids(serialized: str) -> list[str]:
    """The ids of a ``serialize_service_proc_ids`` text.

    Raises:
        ValueError: the text is not a JSON list of ids.
    """
    try:
        items = json.loads(serialized)
    except ValueError as exc:
        raise ValueError(f"service proc ids {serialized!r}: not JSON ({exc})") from None
    if not isinstance(items, list):
        raise ValueError(f"service proc ids {serialized!r}: expected a JSON list")
    return [_check(p) for p in items]


def service_proc_addr(address: str, proc_id: str | None) -> str:
    """``PROC_ID@ADDRESS`` (the address alone when there is no id)."""
    return address if proc_id is None else f"{_check(str(proc_id))}@{address}"


def service_proc_addrs(addresses: Sequence[str], proc_ids: Sequence[str] | None
                       ) -> list[str]:
    """``service_proc_addr`` of each pair.

    Raises:
        ValueError: the two lists differ in length.
    """
    if proc_ids is None:
        return list(addresses)
    if len(addresses) != len(proc_ids):
        raise ValueError(f"{len(addresses)} worker addresses but {len(proc_ids)} service proc "
                         "ids: give one id per address")
    return [service_proc_addr(a, p) for a, p in zip(addresses, proc_ids, strict=True)]


def ranked_service_proc_id_from_env(*, rank_env: str = SERVICE_PROC_RANK_ENV) -> str | None:
    """This host's id: ``SERVICE_PROC_IDS_ENV``'s entry at index ``$rank_env``.

    None when either variable is unset.

    Raises:
        ValueError: the rank is not a number or is out of the list's range.
    """
    serialized = os.environ.get(SERVICE_PROC_IDS_ENV)
    rank_text = os.environ.get(rank_env)
    if serialized is None or rank_text is None:
        return None
    ids = deserialize_service_proc_ids(serialized)
    try:
        rank = int(rank_text)
    except ValueError:
        raise ValueError(f"{rank_env}={rank_text!r} is not a rank") from None
    if not 0 <= rank < len(ids):
        raise ValueError(f"{rank_env}={rank} but {SERVICE_PROC_IDS_ENV} has {len(ids)} ids")
    return ids[rank]
