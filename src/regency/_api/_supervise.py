"""The root of the supervision tree: the default ``unhandled_fault_hook`` and its report."""

from __future__ import annotations

from ..errors import MeshFailure


def default_unhandled_fault_hook(failure: MeshFailure) -> None:
    """The default hook: the failure is fatal for the program (fail fast)."""
    raise SystemExit(1)


def banner(report: str) -> str:
    """The text printed once when an unhandled failure stops the program."""
    return (
        "\n=== regency: unhandled failure, stopping the program ===\n"
        + report
        + "\n(handle failures with __supervise__ in the owner, or replace "
        "regency.actor.unhandled_fault_hook)"
    )
