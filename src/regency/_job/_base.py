"""What every launcher shares: the spec, the cached state, reattaching, and the secret.

Theory of operation
-------------------
A job is a *spec* (how many hosts, which python, which port...) plus, once started, a set of
worker processes somewhere. ``apply()`` makes sure the workers run: when the state file of a
job of the same name, kind and spec says its workers are still alive, they are reused (a
re-run of the controller reattaches); otherwise whatever that file recorded is killed and
fresh workers are launched with the scheduler's own tools, and the file is rewritten.
``state()`` then attaches to the workers (``attach_to_workers``) and returns a
:class:`JobState` holding the ``HostMesh`` of each mesh.

Monarch's second cache sits on top: ``state(cached_path=".regency/job_state.pkl")`` pickles
the job object (spec plus the record of its workers, never connections) into the working
directory; a later ``state()`` of an equal spec reuses those workers while they live, and
kills what a stale pickle recorded. ``job_load``/``job_loads`` read such pickles (the CLI's
``regency apply/kill`` work through them).

The secret: ``REGENCY_SECRET`` (or ``REGENCY_SECRET_FILE``) when set; else one generated per
job, kept private in the cache next to the state file so that a re-run finds it, and put in
this process's environment before regency starts. Workers always get it through their
environment (or, over ssh, on standard input), never on a command line.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import secrets
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from . import _batch, _cache, _telemetry
from ._telemetry import JobProfile, MeshAdminConfig, TelemetryConfig, TelemetryQueryClient

if TYPE_CHECKING:
    from .._api._proc_mesh import HostMesh

__all__ = ["DEFAULT_JOB_PATH", "BatchJob", "Job", "JobError", "JobState", "JobTrait", "job_load",
           "job_loads"]

log = logging.getLogger("regency.job")


DEFAULT_JOB_PATH = ".regency/job_state.pkl"


class JobError(RuntimeError):
    """A job's workers could not be started, found or stopped (the text says why)."""


class JobState:
    """What :meth:`JobTrait.state` returns: the job's host meshes, by name.

    ``state.hosts`` (or ``state.<mesh name>``, or ``state._hosts[name]``) is a ``HostMesh``;
    a name the job lacks raises ``AttributeError`` listing those it has. ``workers`` are the
    worker addresses; ``status`` is ``"launched"`` (fresh workers), ``"reattached"`` (live
    workers found in the job cache) or ``"cached_running"`` (found through ``cached_path``).
    """

    def __init__(self, hosts: Mapping[str, HostMesh], *, name: str = "job",
                 workers: Sequence[str] = (), status: str = "launched") -> None:
        self._hosts = dict(hosts)
        self.name = name
        self.workers = list(workers)
        self.status = status

    def __getattr__(self, attr: str) -> HostMesh:
        meshes = self.__dict__.get("_hosts", {})
        if attr in meshes:
            return meshes[attr]
        raise AttributeError(f"job {self.__dict__.get('name')!r} has no mesh {attr!r}; "
                             f"its meshes: {sorted(meshes)}")

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._hosts})

    def __repr__(self) -> str:
        return f"<JobState {self.name} {self.status} meshes={sorted(self._hosts)}>"


class JobTrait:
    """A job: a declarative spec of worker hosts, plus (once applied) the running workers.

    ``apply()`` makes the workers run; ``state()`` attaches and returns the :class:`JobState`
    (reusing live workers a previous run left, see :meth:`state`); ``kill()`` stops them.
    A job pickles (``dump``/``dumps``, ``job_load``/``job_loads``) with its spec and the
    record of its workers, never with live connections. Subclasses define the spec and how
    to launch, probe and kill.
    """

    kind: ClassVar[str] = "job"
    _kinds: ClassVar[dict[str, type[JobTrait]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        JobTrait._kinds[cls.kind] = cls

    def __init__(self, *, name: str | None = None, mesh_name: str = "hosts",
                 cache_dir: str | os.PathLike[str] | None = None) -> None:
        self._auto_name = name is None
        if name is None:  # one per kind and working directory: projects never share workers
            digest = hashlib.sha1(os.getcwd().encode()).hexdigest()[:10]
            name = f"{self.kind}-{digest}"
        self.name = _cache.check_name(name)
        self.mesh_name = mesh_name
        self._cache_override = cache_dir
        self._state: JobState | None = None
        self._status = "new"
        self._workers: list[str] = []
        self._recorded: dict[str, Any] | None = None
        self._apply_id: str | None = None
        self._saved_to: str | None = None
        self._telemetry_config: TelemetryConfig | None = None
        self._admin_config: MeshAdminConfig | None = None
        self._telemetry_db: str | None = None
        self._admin: dict[str, str] | None = None
        self._client: subprocess.Popen[bytes] | None = None

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

    def _preflight(self) -> None:
        """Check, before anything starts, that the spec can run here (raise JobError why)."""

    def _needs_secret(self) -> bool:
        """Whether the job has workers to authenticate (a job secret is made or found)."""
        return True

    def _mesh_names(self) -> list[str]:
        """The names of the job's host meshes, in order."""
        return [self.mesh_name]

    def _connect(self, recorded: dict[str, Any]) -> dict[str, HostMesh]:
        """Attach to the recorded workers: one ``HostMesh`` per mesh name."""
        from .._api._workers import attach_to_workers

        by_mesh: dict[str, list[str]] = {n: [] for n in self._mesh_names()}
        for w in recorded.get("workers", []):
            by_mesh.setdefault(str(w.get("mesh", self.mesh_name)), []).append(w["addr"])
        return {mesh: attach_to_workers(addrs, name=f"{self.name}.{mesh}")
                for mesh, addrs in by_mesh.items() if addrs}

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

    def apply(self, client_script: str | None = None) -> list[str]:
        """Make sure the workers run (reuse live cached ones, else launch); their addresses.

        With ``client_script``, that script then runs detached as the job's client (a batch
        run): ``REGENCY_BATCH_JOB=1`` and ``REGENCY_JOB_STATE`` (this job, pickled) are in its
        environment, so that its ``job.state()`` reattaches to these workers instead of
        launching others; its output goes to ``.regency/logs/``.
        """
        folder = self.cache_dir
        cached = _cache.load(folder, self.name)
        self._apply_id = uuid.uuid4().hex
        if cached is not None and self._reusable(cached) and self._secret(cached) is not None:
            self._adopt(cached, "reattached")
        else:
            self._preflight()
            if cached is not None:
                self._kill_recorded(cached)
                _cache.forget(folder, self.name)
            secret, source = self._new_secret() if self._needs_secret() else ("", "none")
            state = self._launch(worker_env(secret), secret)
            state.update(kind=self.kind, spec=self._spec(), secret=source, started=time.time())
            _cache.save(folder, self.name, state)
            self._adopt(state, "launched")
        if client_script is not None:
            self._client = _batch.run_client(self, client_script)
        return list(self._workers)

    def _adopt(self, recorded: dict[str, Any], status: str) -> None:
        self._recorded = recorded
        self._status = status
        self._workers = [w["addr"] for w in recorded.get("workers", [])]

    def state(self, cached_path: str | os.PathLike[str] | None = DEFAULT_JOB_PATH) -> JobState:
        """The running job, attached; cached in this object.

        In order: a job already running in this object connects; else the job pickled at
        ``cached_path`` is reused when it has the same kind and spec and its workers still
        live (status ``cached_running``); else whatever that file recorded is killed (a stale
        state is never trusted), the job is applied (which may reattach to live workers of
        the same name and spec in the job cache) and pickled to ``cached_path``.
        ``cached_path=None`` skips the pickle. Inside a batch run (``REGENCY_BATCH_JOB=1``)
        the job only ever reattaches.

        Raises:
            JobError: the workers cannot be started or attached (the text says why).
        """
        if self._state is not None:
            return self._state
        self._configure_components()  # before anything starts: refused if too late
        if os.environ.get("REGENCY_BATCH_JOB") == "1" and os.environ.get("REGENCY_JOB_STATE"):
            return BatchJob(self).state(os.environ["REGENCY_JOB_STATE"])
        if not self.active:
            if cached_path is not None:
                self._from_cached_path(cached_path)
            else:
                self.apply()
        elif self._needs_secret() and self._secret(self._recorded or {}) is None:
            raise JobError(f"job {self.name}: its workers run but their secret is unknown "
                           f"here: set REGENCY_SECRET, or keep {self.cache_dir}/"
                           f"{self.name}.secret (REGENCY_JOB_CACHE={self.cache_dir})")
        return self._attach()

    def _from_cached_path(self, cached_path: str | os.PathLike[str]) -> None:
        cached = _load_cached(cached_path)
        if cached is not None and cached.can_run(self) and cached._secret(
                cached._recorded or {}) is not None:
            self.name = cached.name  # the same job: its secret and cache entry are that name's
            self._adopt(dict(cached._recorded or {}), "cached_running")
            self._apply_id = cached._apply_id
        else:
            if cached is not None and cached._recorded is not None:
                log.info("job %s: the cached state at %s is stale; killing what it recorded",
                         self.name, cached_path)
                cached.kill()
            self.apply()
        self.dump(cached_path)

    def _attach(self) -> JobState:
        assert self._recorded is not None
        components = self._configure_components()
        try:
            meshes = self._connect(self._recorded)
        except Exception as exc:
            hint = ("; they may be serving another controller: stop it, or `kill()` this job"
                    if self._status != "launched" else "")
            raise JobError(f"job {self.name}: cannot attach to its workers {self._workers}: "
                           f"{exc}{hint}") from exc
        self._state = JobState(meshes, name=self.name, workers=self._workers,
                               status=self._status)
        if components:
            self._start_components()
        self._open_mounts(meshes)
        return self._state

    # -- telemetry and admin (Monarch's JobTrait.enable_telemetry / enable_admin) -------------
    def enable_telemetry(self, config: TelemetryConfig | None = None, *,
                         mesh_admin_config: MeshAdminConfig | None = None,
                         **kwargs: Any) -> JobTrait:
        """Record the job into its event store from the next :meth:`state` on.

        ``config`` (or ``TelemetryConfig(**kwargs)``) says how long rows are kept, how often
        procs and actors are sampled, and whether the dashboard is served (on
        ``dashboard_port``). ``mesh_admin_config`` also serves the JSON API, as
        :meth:`enable_admin`. Must come before the process's first regency call. Returns
        the job, for chaining. See ``docs/jobs.md``.
        """
        self._telemetry_config = config if config is not None else TelemetryConfig(**kwargs)
        if mesh_admin_config is not None:
            self._admin_config = mesh_admin_config
        return self

    def enable_admin(self, config: MeshAdminConfig | None = None, **kwargs: Any) -> JobTrait:
        """Serve the job's JSON HTTP API and dashboard from the next :meth:`state` on
        (regency's stand-in for Monarch's mesh admin server); :attr:`admin_url` names it.
        ``config`` or ``MeshAdminConfig(**kwargs)``. Returns the job, for chaining."""
        self._admin_config = config if config is not None else MeshAdminConfig(**kwargs)
        return self

    def _configure_components(self) -> bool:
        """Set up the configuration the declared components need; whether there are any.

        Raises:
            JobError: regency already runs in this process without them.
        """
        telemetry = self.__dict__.get("_telemetry_config")
        admin = self.__dict__.get("_admin_config")
        if telemetry is None and admin is None:
            return False
        try:
            _telemetry.configure_for(telemetry, admin)
        except RuntimeError as exc:
            raise JobError(f"job {self.name}: {exc}") from None
        return True

    def _start_components(self) -> None:
        self._telemetry_db = _telemetry.store_path()
        self._admin = _telemetry.admin_info()

    @property
    def admin_url(self) -> str | None:
        """The URL of the job's JSON API and dashboard (``enable_admin``, or telemetry with
        ``include_dashboard``) once :meth:`state` served it; the token is in
        :attr:`admin_token`."""
        admin = self.__dict__.get("_admin")
        return None if admin is None else admin["url"]

    @property
    def admin_token(self) -> str | None:
        """The bearer token of :attr:`admin_url`'s ``/api/v1/`` endpoints."""
        admin = self.__dict__.get("_admin")
        return None if admin is None else admin["token"]

    def telemetry_query_client(self) -> TelemetryQueryClient:
        """A client running SQL over the job's event store (``.query(sql)``).

        Works in any process that can read the store, e.g. after ``job_load()``.

        Raises:
            RuntimeError: the job is not running, has no telemetry, or its store is gone.
        """
        if not self.active:
            raise RuntimeError(f"job {self.name} is not running: apply it (job.state()) first")
        if self.__dict__.get("_telemetry_config") is None:
            raise RuntimeError(f"job {self.name} has no telemetry: call job.enable_telemetry() "
                               "before job.state()")
        db = self.__dict__.get("_telemetry_db")
        if db is None:
            raise RuntimeError(f"job {self.name}: its telemetry store is not open yet: call "
                               "job.state() first")
        return _telemetry.TelemetryQueryClient(db)

    def profile(self, *, on_trace_ready: Callable[[JobProfile], object] | None = None
                ) -> JobProfile:
        """Profile a block of work: ``with job.profile(on_trace_ready=fn) as prof: ...``.

        The calls and spans every proc recorded inside the block become a Chrome trace
        (``prof.trace``, ``prof.export_chrome_trace(path)``), passed to ``on_trace_ready``.

        Raises:
            RuntimeError: telemetry was not enabled, or :meth:`state` was not called yet.
        """
        if self.__dict__.get("_telemetry_config") is None:
            raise RuntimeError("job.profile() needs the job's telemetry: call "
                               "job.enable_telemetry() before job.state()")
        db = _telemetry.store_path()
        if db is None:
            raise RuntimeError("job.profile(): telemetry is not recording in this process; "
                               "call job.state() first")
        return _telemetry.JobProfile(db, on_trace_ready)

    # -- mounts (Monarch's JobTrait.remote_mount / gather_mount) -------------------------------
    def remote_mount(self, source: str, mntpoint: str | None = None,
                     meshes: list[str] | None = None,
                     python_exe: str | None = ".venv/bin/python", **kwargs: Any) -> None:
        """Declare a local directory to show read-only on the workers through FUSE.

        Nothing mounts now: the next :meth:`state` mounts it (``regency.remotemount``) on
        the meshes named (default: all), and :meth:`kill` unmounts it. ``mntpoint`` defaults
        to ``source``; ``$SUBDIR`` in it becomes each host's coordinates. ``kwargs`` go to
        ``remotemount`` (``fanout``). ``python_exe`` is accepted for Monarch's signature;
        regency's procs run their host's Python, so it is not used.
        """
        known = self._mesh_names()
        bad = [m for m in meshes or [] if m not in known]
        if bad:
            raise ValueError(f"remote_mount: no mesh named {bad} in job {self.name}; its "
                             f"meshes are {known}")
        if not Path(source).is_dir():
            raise ValueError(f"remote_mount: the source {source!r} is not a directory")
        self.__dict__.setdefault("_mounts", []).append(
            {"source": source, "mntpoint": mntpoint, "meshes": meshes, "kwargs": kwargs})

    def gather_mount(self, remote_mount_point: str, local_mount_point: str,
                     meshes: list[str] | None = None) -> None:
        """Declare the workers' ``remote_mount_point`` to show here, read-only, under
        ``local_mount_point`` (one subdirectory per host; per mesh name too when several
        meshes are gathered). The next :meth:`state` mounts it; :meth:`kill` unmounts it."""
        known = self._mesh_names()
        bad = [m for m in meshes or [] if m not in known]
        if bad:
            raise ValueError(f"gather_mount: no mesh named {bad} in job {self.name}; its "
                             f"meshes are {known}")
        self.__dict__.setdefault("_gathers", []).append(
            {"remote": remote_mount_point, "local": local_mount_point, "meshes": meshes})

    def _open_mounts(self, meshes: Mapping[str, HostMesh]) -> None:
        from .._mount._gather import gather_mount
        from .._mount._remote import remotemount

        handles = self.__dict__.setdefault("_mount_handles", [])
        for spec in self.__dict__.get("_mounts", []):
            for name, mesh in meshes.items():
                if spec["meshes"] is None or name in spec["meshes"]:
                    handles.append(remotemount(mesh, spec["source"], spec["mntpoint"],
                                               **spec["kwargs"]).open())
        for spec in self.__dict__.get("_gathers", []):
            chosen = [n for n in meshes if spec["meshes"] is None or n in spec["meshes"]]
            for name in chosen:
                local = spec["local"] if len(chosen) == 1 else \
                    os.path.join(spec["local"], name)
                handles.append(gather_mount(meshes[name], spec["remote"], local))

    def _close_mounts(self) -> None:
        handles = self.__dict__.pop("_mount_handles", [])
        for handle in handles:
            try:
                handle.close()
            except Exception as exc:  # noqa: BLE001 - the workers are stopped after this
                log.warning("job %s: closing a mount failed: %s", self.name, exc)

    def can_run(self, spec: JobTrait) -> bool:
        """Whether this (running) job can serve ``spec``: same kind and spec, workers alive."""
        return (type(spec) is type(self) and spec._spec() == self._spec()
                and self._recorded is not None and self._reusable(self._recorded))

    @property
    def active(self) -> bool:
        """Whether this object's workers were applied and all still run."""
        return self._recorded is not None and self._status != "killed" and \
            self._reusable(self._recorded)

    @property
    def apply_id(self) -> str | None:
        """A fresh id per ``apply()`` (kept when a cached job is reused); None before."""
        return self._apply_id

    def host_mesh(self, name: str | None = None) -> HostMesh:
        """The job's ``HostMesh`` called ``name`` (default: the first), attaching if needed.

        Uses the job cache only (no ``cached_path`` pickle), as before ``state()`` had one.
        """
        return getattr(self.state(cached_path=None), name or self._mesh_names()[0])

    @property
    def status(self) -> str:
        """``new``, ``launched``, ``reattached`` or ``cached_running``; ``killed`` after kill."""
        return self._status

    @property
    def workers(self) -> list[str]:
        """The worker addresses (empty before ``apply``/``state``)."""
        return list(self._workers)

    def kill(self) -> None:
        """Stop the workers (gracefully through the mesh when attached) and forget the job.

        The pickle this object saved (``state(cached_path)``) is removed too.
        """
        self._close_mounts()
        if self._state is not None:
            for mesh in self._state._hosts.values():
                try:
                    mesh.shutdown().get(timeout=20)
                except Exception:  # noqa: BLE001 - the workers are killed below either way
                    pass
            self._state = None
        folder = self.cache_dir
        cached = _cache.load(folder, self.name)
        for recorded in (cached, self._recorded):
            if recorded is not None:
                self._kill_recorded(recorded)
        _cache.forget(folder, self.name)
        if self._saved_to is not None:
            Path(self._saved_to).unlink(missing_ok=True)
        self._status = "killed"
        self._workers = []
        self._recorded = None

    def dump(self, filename: str | os.PathLike[str] = DEFAULT_JOB_PATH) -> None:
        """Pickle this job (spec and worker record, no connections) to ``filename``."""
        path = Path(filename)
        path.parent.mkdir(parents=True, exist_ok=True)
        _cache.write_private_bytes(path, self.dumps())
        self._saved_to = str(path)

    def dumps(self) -> bytes:
        """This job pickled (spec and worker record, no connections)."""
        return pickle.dumps(self)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_state"] = None
        state["_saved_to"] = None
        state.pop("_mount_handles", None)
        state["_client"] = None
        return state

    def __enter__(self) -> JobTrait:
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
        cls = JobTrait._kinds.get(str(cached.get("kind")))
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
        text = secrets.token_hex(32)  # hex: never starts with "-" when passed on a command line
        _cache.save_secret(self.cache_dir, self.name, text)
        install_secret(text)
        return text, "generated"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self._status}>"


Job = JobTrait
"""The name this class had before it took Monarch's."""


class BatchJob:
    """A job seen from inside its own batch run: ``state()`` only ever reattaches.

    ``BatchJob(job).state(path)`` reuses the workers of the job pickled at ``path`` (or those
    ``job`` already runs); it never launches. Everything else is ``job``'s.

    Raises (from ``state``):
        JobError: no live workers of that job and spec were found; the text says where it
            looked.
    """

    def __init__(self, job: JobTrait) -> None:
        self._job = job

    def state(self, cached_path: str | os.PathLike[str] | None = DEFAULT_JOB_PATH) -> JobState:
        """The job's state, reattached (see the class docstring)."""
        job = self._job
        if job._state is not None:
            return job._state
        if job.active and job._secret(job._recorded or {}) is None:
            raise JobError(f"batch job {job.name}: the job secret is unknown here")
        if not job.active:
            cached = _load_cached(cached_path) if cached_path is not None else None
            if cached is None or not cached.can_run(job) or cached._secret(
                    cached._recorded or {}) is None:
                why = "no readable job there" if cached is None else \
                    "its workers are gone or its spec differs"
                raise JobError(f"batch job {job.name}: cannot reattach through {cached_path}: "
                               f"{why}. A batch client only reattaches; apply the job first")
            job.name = cached.name
            job._adopt(dict(cached._recorded or {}), "cached_running")
            job._apply_id = cached._apply_id
        return job._attach()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.__dict__["_job"], attr)


def _load_cached(path: str | os.PathLike[str] | None) -> JobTrait | None:
    """The job pickled at ``path``; None when there is none (or it cannot be read: logged)."""
    if path is None or not os.path.exists(path):
        return None
    try:
        return job_load(path)
    except Exception as exc:  # noqa: BLE001 - an unreadable state is stale, not fatal
        log.warning("ignoring the job state at %s: cannot load it (%s)", path, exc)
        return None


def job_load(filename: str | os.PathLike[str] = DEFAULT_JOB_PATH) -> JobTrait:
    """The job pickled at ``filename`` (by ``dump`` or ``state(cached_path)``).

    Raises:
        JobError: the file is not a pickled job.
    """
    with open(filename, "rb") as f:
        data = f.read()
    try:
        return job_loads(data)
    except JobError as exc:
        raise JobError(f"{filename}: {exc}") from None


def job_loads(data: bytes) -> JobTrait:
    """The job pickled in ``data`` (by ``dumps``).

    Raises:
        JobError: ``data`` is not a pickled job.
    """
    try:
        job = pickle.loads(data)
    except Exception as exc:
        raise JobError(f"not a pickled job: {exc}") from exc
    if not isinstance(job, JobTrait):
        raise JobError(f"not a pickled job but a {type(job).__name__}")
    job._saved_to = None
    return job


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
