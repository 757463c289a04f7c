"""``mast_reserve``: Monarch's notebook helper for Meta's MAST scheduler, and what to use here."""

from __future__ import annotations

from typing import Any

__all__ = ["mast_reserve"]


def mast_reserve(*args: Any, **kwargs: Any) -> Any:
    """Not in regency: reserve hosts on MAST, a scheduler inside Meta.

    Raises:
        RuntimeError: always, naming the job launchers regency has instead.
    """
    raise RuntimeError(
        "mast_reserve reserves hosts on MAST, Meta's internal scheduler, which is not reachable "
        "outside Meta; regency launches workers with regency.job (LocalJob, SSHJob, SlurmJob, "
        "Kubernetes manifests) and attaches with job.host_mesh() (see docs/multi-host.md)")
