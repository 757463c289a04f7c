"""``attach``: Monarch's client gateway, and why regency does without one."""

from __future__ import annotations

__all__ = ["attach"]


def attach(addr: str) -> None:
    """Not in regency: route this client through a remote gateway at ``addr``.

    Monarch's ``attach`` forwards a client's traffic over one duplex connection to a gateway
    inside the cluster, for clients the procs cannot reach. regency's controller talks to
    workers directly, so there is no gateway to attach to.

    Raises:
        RuntimeError: always, saying what to use instead.
    """
    raise RuntimeError(
        f"attach({addr!r}): regency has no client gateway; its controller connects to the "
        "workers directly. Start workers with `regency worker --listen tcp://HOST:PORT` (or "
        "run_worker_loop_forever) and connect with attach_to_workers(workers=[...]); from "
        "outside a cluster, run the controller inside it or forward the workers' ports "
        "(see docs/multi-host.md)")
