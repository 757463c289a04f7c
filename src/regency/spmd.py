"""SPMD on a mesh: torchrun's environment from mesh coordinates, and torchrun scripts run
unmodified on a proc mesh (Monarch's ``monarch.spmd``).

The **last** dimension of the proc mesh is the per-node (GPU) dimension, as torchrun's
``--nproc-per-node``; the others together are the nodes. In each proc:

* ``LOCAL_RANK`` is the coordinate in the last dimension, ``LOCAL_WORLD_SIZE`` its size;
* ``RANK`` is the global rank, ``WORLD_SIZE`` the product of all sizes;
* ``GROUP_RANK = RANK // LOCAL_WORLD_SIZE``, ``GROUP_WORLD_SIZE = WORLD_SIZE //
  LOCAL_WORLD_SIZE``; ``ROLE_RANK``/``ROLE_WORLD_SIZE`` as ``RANK``/``WORLD_SIZE``,
  ``ROLE_NAME=rank``;
* ``MASTER_ADDR``/``MASTER_PORT`` name a free port on the host of the all-zero rank;
* on a worker's procs, ``GLOO_SOCKET_IFNAME`` names the interface the worker is reached
  on (unless set already), since gloo otherwise advertises its host name's address.

Example::

    from regency.actor import this_host
    from regency.spmd import run_spmd

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    run_spmd(procs, ["train.py", "--epochs", "1"])      # as `torchrun --nproc-per-node 2`

No torch is imported here: the script imports it.
"""

from __future__ import annotations

import os
import runpy
import socket
import sys
from collections.abc import Sequence
from typing import Any

from .actor import Actor, ProcMesh, ValueMesh, context, endpoint

__all__ = ["SPMDActor", "run_spmd", "setup_torch_elastic_env", "setup_torch_elastic_env_async",
           "torch_elastic_env"]


def torch_elastic_env(coords: dict[str, int], sizes: dict[str, int]) -> dict[str, str]:
    """torchrun's variables (without the master) for the proc at ``coords`` of a mesh of
    ``sizes`` (both in dimension order; the last is the per-node one)."""
    labels = list(sizes)
    if not labels:
        return {"LOCAL_RANK": "0", "RANK": "0", "LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "1",
                "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": "0",
                "ROLE_WORLD_SIZE": "1", "ROLE_NAME": "rank"}
    rank, world = 0, 1
    for label in labels:
        rank = rank * sizes[label] + coords.get(label, 0)
        world *= sizes[label]
    local_world = sizes[labels[-1]]
    env = {"LOCAL_RANK": coords.get(labels[-1], 0), "RANK": rank,
           "LOCAL_WORLD_SIZE": local_world, "WORLD_SIZE": world,
           "GROUP_RANK": rank // local_world, "GROUP_WORLD_SIZE": world // local_world,
           "ROLE_RANK": rank, "ROLE_WORLD_SIZE": world, "ROLE_NAME": "rank",
           "TORCHELASTIC_RUN_ID": "regency"}
    return {k: str(v) for k, v in env.items()}


class SPMDActor(Actor):
    """One per proc: knows its torchrun variables; sets them and runs scripts."""

    def __init__(self) -> None:
        point = context().actor_instance.rank  # its place in the whole proc mesh
        coords = {k: int(v) for k, v in dict(point).items()}
        sizes = {k: int(v) for k, v in dict(point.extent).items()}
        self.env = torch_elastic_env(coords, sizes)

    @endpoint
    def get_host_port(self, use_ipaddr: bool | None = None) -> tuple[str, int]:
        """This host's address and a free TCP port on it.

        By default the IP this proc listens on when it is a worker's (reachable by its
        peers by construction), else the host name; ``use_ipaddr=True``: an IP address,
        ``False``: the host name.
        """
        listening = _listening_ip()
        if use_ipaddr is False or (use_ipaddr is None and listening is None):
            host = socket.gethostname()
        else:
            host = listening or _my_ip()
        with socket.socket() as s:
            s.bind(("", 0))
            return host, int(s.getsockname()[1])

    @endpoint
    def setup_env(self, master_addr: str, master_port: int) -> dict[str, str]:
        """Put torchrun's variables and the master in this proc's environment; them."""
        env = {**self.env, "MASTER_ADDR": str(master_addr), "MASTER_PORT": str(master_port)}
        ifname = _interface_of(_listening_ip())
        if ifname is not None and "GLOO_SOCKET_IFNAME" not in os.environ:
            env["GLOO_SOCKET_IFNAME"] = ifname  # gloo would take the hostname's address
        os.environ.update(env)
        return env

    @endpoint
    def main(self, master_addr: str, master_port: int, script_args: Sequence[str],
             env: dict[str, str] | None = None) -> int:
        """Set the environment (plus ``env``) and run a torchrun-style script: ``[path,
        *args]`` or ``["-m", module, *args]``; its exit status (0 when it returns)."""
        self.setup_env(master_addr, master_port)
        os.environ.update(env or {})
        return _run_script(list(script_args))


def _run_script(args: list[str]) -> int:
    if not args:
        raise ValueError("no script: give [path, *args] or ['-m', module, *args]")
    saved = sys.argv[:]
    try:
        if args[0] == "-m":
            if len(args) < 2:
                raise ValueError("-m needs a module name")
            sys.argv = [args[1], *args[2:]]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(args)
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv = saved
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


def _listening_ip() -> str | None:
    """The IP this proc's runtime listens on over tcp, if it is a routable one."""
    from ._api._process import runtime

    bound = runtime().bound_address
    if not bound.startswith("tcp:"):
        return None
    host = bound[4:].rpartition(":")[0].strip("[]")
    return None if host in ("", "0.0.0.0", "::", "127.0.0.1", "localhost") else host


def _interface_of(ip: str | None) -> str | None:
    """The name of the network interface holding ``ip`` (None if unknown)."""
    if ip is None:
        return None
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == ip for a in addrs):
            return str(name)
    return None


def _my_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _master(actors: Any, master_addr: str | None, master_port: int | None,
            use_ipaddr: bool | None) -> tuple[str, int]:
    if master_addr is not None and master_port is not None:
        return master_addr, master_port
    labels = list(actors.extent.labels)
    zero = actors.slice(**dict.fromkeys(labels, 0)) if labels else actors
    host, port = zero.get_host_port.call_one(use_ipaddr).get()
    return master_addr or host, master_port or port


def setup_torch_elastic_env(proc_mesh: ProcMesh, master_addr: str | None = None,
                            master_port: int | None = None,
                            use_ipaddr: bool | None = None) -> None:
    """Set torchrun's variables in every proc of ``proc_mesh`` (the master at the all-zero
    rank unless given). Later actors in those procs see them (e.g. ``init_process_group``)."""
    actors: Any = proc_mesh.spawn("_spmd_env", SPMDActor)
    addr, port = _master(actors, master_addr, master_port, use_ipaddr)
    actors.setup_env.call(addr, port).get()


async def setup_torch_elastic_env_async(proc_mesh: ProcMesh, master_addr: str | None = None,
                                        master_port: int | None = None,
                                        use_ipaddr: bool | None = None) -> None:
    """:func:`setup_torch_elastic_env` for async code."""
    actors: Any = proc_mesh.spawn("_spmd_env", SPMDActor)
    if master_addr is None or master_port is None:
        labels = list(actors.extent.labels)
        zero = actors.slice(**dict.fromkeys(labels, 0)) if labels else actors
        host, port = await zero.get_host_port.call_one(use_ipaddr)
        master_addr, master_port = master_addr or host, master_port or port
    await actors.setup_env.call(master_addr, master_port)


def run_spmd(proc_mesh: ProcMesh, script_args: Sequence[str], *,
             master_addr: str | None = None, master_port: int | None = None,
             use_ipaddr: bool | None = None, env: dict[str, str] | None = None,
             timeout: float | None = None) -> ValueMesh[int]:
    """Run a torchrun-style script (``[path, *args]`` or ``["-m", module, *args]``) in every
    proc of ``proc_mesh`` at once, as torchrun would with ``--nproc-per-node`` = the last
    dimension's size; the exit status of each rank. Output streams with each proc's prefix;
    ``env`` adds variables to every rank's environment.
    """
    actors: Any = proc_mesh.spawn("spmd", SPMDActor)
    addr, port = _master(actors, master_addr, master_port, use_ipaddr)
    return actors.main.call(addr, port, list(script_args), env).get(timeout=timeout)
