"""Where failures go: to the owner's ``__supervise__``, up the tree, and at the root to
``unhandled_fault_hook`` (fail fast by default)."""

from __future__ import annotations

import logging
import sys
from typing import Any

from .._runtime._runtime import Runtime
from ..errors import MeshFailure, SupervisionError
from . import _failfast

log = logging.getLogger("regency.supervision")


def default_unhandled_fault_hook(failure: MeshFailure) -> None:
    """The default hook: the failure is fatal for the program (fail fast)."""
    raise SystemExit(1)


def deliver(rt: Runtime, owner_uid: str | None, failure: MeshFailure) -> None:
    """Hand ``failure`` to the owner actor (``owner_uid``) or, for None, to the root."""
    if owner_uid is None:
        if rt.role == "controller":
            _root(failure)
        else:
            log.error("regency: failure with no owner in this proc:\n%s", failure.report())
        return
    cell = rt.cells.get(owner_uid)
    behavior = getattr(cell, "behavior", None)
    if cell is None or behavior is None:
        log.error("regency: owner %s of a failed mesh is gone:\n%s", owner_uid, failure.report())
        return
    cell.control(lambda: behavior.supervise(failure))


def _root(failure: MeshFailure) -> None:
    module = sys.modules.get("regency.actor")
    hook: Any = getattr(module, "unhandled_fault_hook", default_unhandled_fault_hook)
    try:
        hook(failure)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        _failfast.fail_fast(_banner(failure), code or 1)
    except BaseException as exc:
        _failfast.fail_fast(_banner(failure) + f"\n(unhandled_fault_hook raised {exc!r})", 1)


def _banner(failure: MeshFailure) -> str:
    return (
        "\n=== regency: unhandled failure, stopping the program ===\n"
        + failure.report()
        + "\n(handle failures with __supervise__ in the owner, or replace "
        "regency.actor.unhandled_fault_hook)"
    )


def fail_collectors(rt: Runtime, addr: str, failure: MeshFailure | None, why: str) -> None:
    """Fail every pending call that waits on the proc at ``addr``."""
    collectors: dict[int, Any] = rt.collectors
    for port_id, targets in list(rt.port_targets.items()):
        if addr in targets:
            collector = collectors.get(port_id)
            if collector is not None and collector.waits_on(addr):
                collector.lost(SupervisionError(f"{collector.label} failed: {why}", failure))
