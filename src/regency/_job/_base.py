"""What every launcher shares: the spec, the cached state, reattaching, and the secret.

Theory of operation
-------------------
A job is a *spec* (how many hosts, which python, which port...) plus, once started, a set of
worker processes somewhere. ``apply()`` makes sure the workers run: when the state file of a
job of the same name, kind and spec says its workers are still alive, they are reused (a
re-run of the controller reattaches); otherwise whatever that file recorded is killed and
fresh workers are launched with the scheduler's own tools, and the file is rewritten.
``state()`` then attaches to the workers (``attach_to_workers``) and returns a
:class:`JobState` holding the ``HostMesh``.

The secret: ``REGENCY_SECRET`` (or ``REGENCY_SECRET_FILE``) when set; else one generated per
job, kept private in the cache next to the state file so that a re-run finds it, and put in
this process's environment before regency starts. Workers always get it through their
environment (or, over ssh, on standard input), never on a command line.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from . import _cache

if TYPE_CHECKING:
    from .._api._proc_mesh import HostMesh

__all__ = ["Job", "JobError", "JobState"]


class JobError(RuntimeError):
    """A job's workers could not be started, found or stopped (the text says why)."""


class JobState:
    """What :meth:`Job.state` returns: the job's host meshes, by name.

    ``state.hosts`` (or the job's ``mesh_name``) is the ``HostMesh``; ``workers`` are the
    worker addresses; ``status`` is ``"launched"`` (fresh workers) or ``"reattached"``.
    """

    def __init__(self, name: str, meshes: dict[str, HostMesh], workers: list[str],
                 status: str) -> None:
        self.name = name
        self._meshes = dict(meshes)
        self.workers = list(workers)
        self.status = status

    def __getattr__(self, attr: str) -> HostMesh:
        meshes = self.__dict__.get("_meshes", {})
        if attr in meshes:
            return meshes[attr]
        raise AttributeError(f"job {self.__dict__.get('name')!r} has no mesh {attr!r}; "
                             f"its meshes: {sorted(meshes)}")

    def __repr__(self) -> str:
        return f"<JobState {self.name} {self.status} meshes={sorted(self._meshes)}>"


class Job:
    """Base of the launchers. Subclasses define the spec and how to launch, probe and kill."""

    kind: ClassVar[str] = "job"
    _kinds: ClassVar[dict[str, type[Job]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Job._kinds[cls.kind] = cls

    def __init__(self, *, name: str, mesh_name: str = "hosts",
                 cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.name = _cache.check_name(name)
        self.mesh_name = mesh_name
        self._cache_override = cache_dir
        self._state: JobState | None = None
        self._status = "new"
        self._workers: list[str] = []

    # -- what subclasses provide ---------------------------------------------------------------
    def _spec(self) -> dict[str, Any]:
        """What must be equal for a cached job to be reused (JSON-able)."""
        raise NotImplementedError

    def _launch(self, env: dict[str, str], secret: str) -> dict[str, Any]:
        """Start the workers; returns the state to cache, with ``workers``: [{addr, ...}]."""
        raise NotImplementedError

    @classmethod
    def _alive(cls, recorded: dict[str, Any]) -> bool:
        """Whether the workers recorded in ``recorded`` are all still running."""
        raise NotImplementedError

    @classmethod
    def _kill(cls, recorded: dict[str, Any]) -> None:
        """Stop the workers recorded in ``recorded`` (they may be gone already)."""
        raise NotImplementedError

    # -- the job's life --------------------------------------------------------------------------
    @property
    def cache_dir(self) -> Path:
        """The folder holding this job's state file, secret and logs."""
        return _cache.cache_dir(self._cache_override)

    @property
    def log_dir(self) -> Path:
        """Where the workers' output goes (for launchers that can collect it)."""
        path = self.cache_dir / self.name
        path.mkdir(exist_ok=True, mode=0o700)
        return path

    def apply(self) -> list[str]:
        """Make sure the workers run (reuse live cached ones, else launch); their addresses."""
        folder = self.cache_dir
        cached = _cache.load(folder, self.name)
        if cached is not None and self._reusable(cached):
            secret = self._secret(cached)
            if secret is not None:
                self._status = "reattached"
                self._workers = [w["addr"] for w in cached["workers"]]
                return list(self._workers)
        if cached is not None:
            self._kill_recorded(cached)
            _cache.forget(folder, self.name)
        secret, source = self._new_secret()
        env = worker_env(secret)
        state = self._launch(env, secret)
        state.update(kind=self.kind, spec=self._spec(), secret=source, started=time.time())
        _cache.save(folder, self.name, state)
        self._status = "launched"
        self._workers = [w["addr"] for w in state["workers"]]
        return list(self._workers)

    def state(self) -> JobState:
        """The running job: workers started (or reused) and attached; cached in this object."""
        if self._state is not None:
            return self._state
        addrs = self.apply()
        from .._api._workers import attach_to_workers

        try:
            mesh = attach_to_workers(addrs, name=self.name)
        except Exception as exc:
            hint = ("; they may be serving another controller: stop it, or `kill()` this job"
                    if self._status == "reattached" else "")
            raise JobError(f"job {self.name}: cannot attach to its workers {addrs}: {exc}{hint}"
                           ) from exc
        self._state = JobState(self.name, {self.mesh_name: mesh}, addrs, self._status)
        return self._state

    def host_mesh(self) -> HostMesh:
        """The job's ``HostMesh`` (``{hosts: N}``), attaching if needed."""
        return getattr(self.state(), self.mesh_name)

    @property
    def status(self) -> str:
        """``new`` (nothing done yet), ``launched`` or ``reattached``; ``killed`` after kill."""
        return self._status

    @property
    def workers(self) -> list[str]:
        """The worker addresses (empty before ``apply``/``state``)."""
        return list(self._workers)

    def kill(self) -> None:
        """Stop the workers (gracefully through the mesh when attached) and forget the job."""
        if self._state is not None:
            mesh = getattr(self._state, self.mesh_name)
            try:
                mesh.shutdown().get(timeout=20)
            except Exception:  # noqa: BLE001 - the workers are killed below either way
                pass
            self._state = None
        folder = self.cache_dir
        cached = _cache.load(folder, self.name)
        if cached is not None:
            self._kill_recorded(cached)
        _cache.forget(folder, self.name)
        self._status = "killed"
        self._workers = []

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

    # -- helpers ---------------------------------------------------------------------------------
    def _reusable(self, cached: dict[str, Any]) -> bool:
        if cached.get("kind") != self.kind or cached.get("spec") != self._spec():
            return False
        try:
            return bool(cached.get("workers")) and type(self)._alive(cached)
        except Exception:  # noqa: BLE001 - a probe that fails means: do not reuse
            return False

    def _kill_recorded(self, cached: dict[str, Any]) -> None:
        cls = Job._kinds.get(str(cached.get("kind")))
        if cls is None:
            raise JobError(f"job {self.name}: the state file records an unknown kind "
                           f"{cached.get('kind')!r}; remove {self.cache_dir / self.name}.json")
        cls._kill(cached)

    def _secret(self, cached: dict[str, Any]) -> str | None:
        """The secret of a cached job, installed in this process; None if unknown."""
        text = env_secret()
        if text is None and cached.get("secret") == "generated":
            text = _cache.load_secret(self.cache_dir, self.name)
        if text is None:
            return None
        install_secret(text)
        return text

    def _new_secret(self) -> tuple[str, str]:
        text = env_secret()
        if text is not None:
            install_secret(text)
            return text, "environment"
        text = secrets.token_urlsafe(32)
        _cache.save_secret(self.cache_dir, self.name, text)
        install_secret(text)
        return text, "generated"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self._status}>"


def env_secret() -> str | None:
    """The job secret from ``REGENCY_SECRET`` or ``REGENCY_SECRET_FILE``, as text."""
    text = os.environ.get("REGENCY_SECRET")
    if text is not None and text.strip():
        return text.strip()
    path = os.environ.get("REGENCY_SECRET_FILE")
    if path:
        try:
            with open(path) as f:
                data = f.read().strip()
        except OSError as exc:
            raise JobError(f"cannot read REGENCY_SECRET_FILE={path}: {exc}") from exc
        return data or None
    return None


def install_secret(text: str) -> None:
    """Make ``text`` this process's job secret, before regency's runtime starts.

    Raises:
        JobError: regency already runs here with another secret.
    """
    from .._runtime import _current
    from .._runtime._secret import configured_secret

    if env_secret() != text:
        os.environ["REGENCY_SECRET"] = text
        os.environ.pop("REGENCY_SECRET_FILE", None)
    rt = _current.get()
    if rt is not None and rt.secret != configured_secret():
        raise JobError("regency already runs in this process with another job secret: start "
                       "the job before any other regency call, or set REGENCY_SECRET before "
                       "the first one")


def worker_env(secret: str) -> dict[str, str]:
    """The environment for a worker: ours, with the job secret in ``REGENCY_SECRET``."""
    env = {k: v for k, v in os.environ.items() if k != "REGENCY_SECRET_FILE"}
    env["REGENCY_SECRET"] = secret
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
