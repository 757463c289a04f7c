"""``exec_command`` and ``hosts_from_config``: Monarch's job helpers over regency's pieces.

``exec_command`` is ``regency exec`` as a function: fresh procs on the host mesh run one
command each (through the same actor as the CLI) and the worst exit status comes back in a
Future. ``hosts_from_config(name)`` is the host mesh ``name`` of the project's configured
job: the current context's spec (``regency apply module.attr``), reattached.
"""

from __future__ import annotations

import shlex
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._api._future import Future
    from .._api._proc_mesh import HostMesh

__all__ = ["exec_command", "hosts_from_config"]


def _target(host_mesh: HostMesh, rank: int | None, point: dict[str, int] | None) -> HostMesh:
    if rank is not None and point is not None:
        raise ValueError("exec_command: give rank or point, not both")
    if point is not None:
        return host_mesh.slice(**point)
    if rank is not None:
        flat = host_mesh.flatten("rank")
        if not 0 <= rank < flat.size():
            raise ValueError(f"exec_command: rank {rank} is not in a mesh of {flat.size()} "
                             "hosts")
        return flat.slice(rank=rank)
    return host_mesh


def exec_command(host_mesh: HostMesh, cmd: list[str], env: dict[str, str] | None = None,
                 workdir: str | None = None, output_dir: str | None = None,
                 rank: int | None = None, point: dict[str, int] | None = None,
                 per_host: dict[str, int] | None = None) -> Future[int]:
    """Run ``cmd`` on every proc of ``host_mesh`` (or of the host at ``rank``/``point``).

    The procs are spawned now (``per_host`` of them per host, default one) and stopped when
    the command ended everywhere. Output streams to this terminal with each proc's prefix,
    or, with ``output_dir``, goes to ``stdout.txt``/``stderr.txt`` in that folder on each
    host. Every command gets ``REGENCY_RANK_<DIM>``/``REGENCY_SIZE_<DIM>``, ``REGENCY_RANK``
    and ``REGENCY_WORLD_SIZE``.

    Returns:
        A Future of the worst exit status of the ranks (a signal N counts as 128+N).

    Raises:
        ValueError: ``cmd`` is empty, or ``rank``/``point`` do not name a host of the mesh.
    """
    from .._api._future import Future
    from .._cli._exec_actor import ExecActor
    from .._runtime._completion import Completion

    if not cmd:
        raise ValueError("exec_command: cmd is empty; e.g. ['hostname']")
    text = shlex.join([str(c) for c in cmd])
    procs = _target(host_mesh, rank, point).spawn_procs(per_host=per_host or {}, name="exec")
    actors: Any = procs.spawn("exec", ExecActor)
    pending = actors.run.call(text, dict(env or {}), workdir, output_dir)
    done = Completion(f"exec_command {text!r}")

    def finish() -> None:
        try:
            codes = pending.get()
            worst = 0
            for _point, code in codes.values():
                worst = max(worst, 128 - code if code < 0 else code)
            value: Any = worst
        except BaseException as exc:  # noqa: BLE001 - handed to the Future
            procs.stop().get(timeout=60)
            done.set_exception(exc)
            return
        try:
            procs.stop().get(timeout=60)
        finally:
            done.set_result(value)

    threading.Thread(target=finish, name="regency-exec-command", daemon=True).start()
    result: Future[int] = Future._from(done)
    return result


def hosts_from_config(name: str) -> HostMesh:
    """The host mesh ``name`` of the project's configured job.

    The job is the current context's spec in ``.regency/`` of the working directory (set by
    ``regency apply module.attr`` or ``set_current_job``); its workers are reattached (or
    launched, as ``job.state()`` does), so the same code runs on whatever the configuration
    names: a ``ProcessJob`` on a laptop, a ``SlurmJob`` on a cluster.

    Raises:
        FileNotFoundError: no job is configured here.
        AttributeError: the job has no mesh ``name`` (the text lists those it has).
    """
    from ..job import load_current_job

    job = load_current_job()
    from .._cli._jobs import _state_path

    return getattr(job.state(cached_path=str(_state_path())), name)
