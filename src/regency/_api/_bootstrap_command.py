"""Bootstrap commands: the program a proc runs, as Monarch's ``BootstrapCommand``.

Procs normally start as forks of the fork server, running this interpreter. A bootstrap
command (``spawn_procs(bootstrap_command=...)``, ``HostMesh.with_python_executable``) makes
the forked child ``exec`` a program instead: another Python (a different virtual
environment, say) or a wrapper, which must in the end run ``python -m
regency._api._bootstrap_main``. The child keeps its pid (so supervision and reaping are as
for any proc), its output pipes and its parent-death signal; what it should become travels
in a memory file whose descriptor is named by ``REGENCY_PROC_SPEC_FD``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

__all__ = ["BOOTSTRAP_MAIN", "BootstrapCommand", "default_bootstrap_cmd"]

BOOTSTRAP_MAIN = "regency._api._bootstrap_main"


@dataclass
class BootstrapCommand:
    """How to start a proc: ``program`` run as ``arg0 args...`` with ``env``.

    Attributes:
        program: the executable (a path).
        arg0: the process's ``argv[0]`` (default: ``program``).
        args: the command line arguments; a Python must end up running
            ``-m regency._api._bootstrap_main``.
        env: variables set on top of the inherited environment; ``None`` removes one.
        inherit_env: start from the spawner's environment (default) or from an empty one.
    """

    program: str
    arg0: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str | None] = field(default_factory=dict)
    inherit_env: bool = True

    def __post_init__(self) -> None:
        self.args = [str(a) for a in self.args]
        self.env = dict(self.env)

    def with_env(self, env: Mapping[str, str | None]) -> BootstrapCommand:
        """A copy with ``env`` merged on top (``None`` removes a variable)."""
        return replace(self, args=list(self.args), env={**self.env, **env})

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """The environment the program gets, given the spawner's ``base``."""
        out = dict(base) if self.inherit_env else {}
        for key, value in self.env.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    def argv(self) -> list[str]:
        """``[arg0, *args]``."""
        return [self.arg0 or self.program, *self.args]

    def __repr__(self) -> str:
        arg0 = f", arg0={self.arg0!r}" if self.arg0 else ""
        return (f"BootstrapCommand(program={self.program!r}{arg0}, args={self.args!r}, "
                f"env={self.env!r}, inherit_env={self.inherit_env})")


def default_bootstrap_cmd() -> BootstrapCommand:
    """The command procs would run by default: this Python, running regency's proc main.

    A base to customise (``.with_env({...})``, or another ``program``); procs spawned with it
    are started by ``exec`` rather than forked from the preloaded fork server, so they start
    slower (about an interpreter start and regency's import).
    """
    return BootstrapCommand(sys.executable, None, ["-m", BOOTSTRAP_MAIN], {})


def python_command(python: str) -> BootstrapCommand:
    """The default command with another Python executable."""
    return BootstrapCommand(python, None, ["-m", BOOTSTRAP_MAIN], {})
