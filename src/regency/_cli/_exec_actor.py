"""The actor ``regency exec`` and ``regency shell`` put on each proc: it runs a command.

The command inherits the proc's standard output and error, which regency forwards to the
controller with the proc's prefix (``[exec {'hosts': 1}] ...``): output streams as it comes.
Each command gets ``REGENCY_RANK_<DIM>`` and ``REGENCY_SIZE_<DIM>`` for every dimension of
the mesh (the dimension name keeps its case), plus ``REGENCY_RANK`` and ``REGENCY_WORLD_SIZE``.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ..actor import Actor, context, endpoint

__all__ = ["ExecActor"]


class ExecActor(Actor):
    """Runs shell commands in its proc; knows its coordinates in the mesh."""

    def __init__(self) -> None:
        point = context().actor_instance.rank  # this actor's place in the whole mesh
        self.coords = {k: int(v) for k, v in dict(point).items()}
        self.sizes = {k: int(v) for k, v in dict(point.extent).items()}
        self.rank = int(point.rank)

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        env = dict(os.environ)
        for dim, size in self.sizes.items():
            env[f"REGENCY_RANK_{dim}"] = str(self.coords.get(dim, 0))
            env[f"REGENCY_SIZE_{dim}"] = str(size)
        world = 1
        for size in self.sizes.values():
            world *= size
        env["REGENCY_RANK"] = str(self.rank)
        env["REGENCY_WORLD_SIZE"] = str(world)
        env.update(extra)
        return env

    @endpoint
    def run(self, command: str, env: dict[str, str], workdir: str | None,
            output_dir: str | None = None) -> tuple[dict[str, int], int]:
        """Run ``command`` with bash (sh if there is none); this actor's coordinates and the
        exit status (-N: killed by signal N). With ``output_dir``, the output goes to
        ``stdout.txt``/``stderr.txt`` there instead of being forwarded."""
        shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            if output_dir is None:
                proc = subprocess.run([shell, "-c", command], env=self._env(env),
                                      cwd=workdir or None, stdin=subprocess.DEVNULL)
            else:
                os.makedirs(output_dir, exist_ok=True)
                with open(os.path.join(output_dir, "stdout.txt"), "wb") as out, \
                        open(os.path.join(output_dir, "stderr.txt"), "wb") as err:
                    proc = subprocess.run([shell, "-c", command], env=self._env(env),
                                          cwd=workdir or None, stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=err)
        except OSError as exc:  # e.g. the working directory does not exist here
            print(f"regency exec: {exc}", file=sys.stderr, flush=True)
            return dict(self.coords), 127
        return dict(self.coords), proc.returncode

    @endpoint
    def where(self) -> dict[str, int]:
        """This actor's coordinates."""
        return dict(self.coords)
