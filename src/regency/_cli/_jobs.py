"""``regency apply | context | kill | exec | shell``: a job's life from the command line.

State lives in ``.regency/`` of the working directory, as Monarch's ``.monarch/``:

* ``.regency/current`` names the current context (``default`` when absent);
* ``.regency/<context>/spec`` holds the job spec, ``module.attr`` (a job, or a function
  returning one, importable from the working directory);
* ``.regency/<context>/state.pkl`` is the pickled running job, and
  ``.regency/job_state.pkl`` a link to the current context's, so that a script's own
  ``job.state()`` reattaches to the job ``regency apply`` started.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(".regency")

__all__ = ["add_commands"]


class CliError(Exception):
    """Bad input or state: the message says what and what to do; exit status 2."""


# -- contexts ----------
def current_context() -> str:
    """The current context's name."""
    try:
        return (ROOT / "current").read_text().strip() or "default"
    except OSError:
        return "default"


def _ctx(name: str | None = None) -> Path:
    name = name or current_context()
    if not name or "/" in name or name.startswith("."):
        raise CliError(f"context name {name!r}: use letters, digits, '_', '-' and '.'")
    return ROOT / name


def _state_path(ctx: str | None = None) -> Path:
    return _ctx(ctx) / "state.pkl"


def _link_current(ctx: str) -> None:
    """Point ``.regency/job_state.pkl`` at context ``ctx``'s state."""
    ROOT.mkdir(exist_ok=True)
    link = ROOT / "job_state.pkl"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(Path(ctx) / "state.pkl")
    (ROOT / "current").write_text(ctx + "\n")


def _load_spec(spec: str) -> Any:
    from ..job import JobTrait

    module, _, attr = spec.rpartition(".")
    if not module or not attr:
        raise CliError(f"job spec {spec!r} must be module.attr, e.g. jobs.train (a job object "
                       "or a function returning one, in jobs.py of this directory)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise CliError(f"job spec {spec!r}: cannot import {module!r} from {os.getcwd()}: {exc}"
                       ) from None
    except AttributeError:
        raise CliError(f"job spec {spec!r}: module {module!r} has no {attr!r}") from None
    if callable(obj) and not isinstance(obj, JobTrait):
        obj = obj()
    if not isinstance(obj, JobTrait):
        raise CliError(f"job spec {spec!r} is a {type(obj).__name__}, not a job (ProcessJob, "
                       "SlurmJob, ... from regency.job)")
    return obj


def _loaded_job(ctx: str | None = None) -> Any:
    from ..job import job_load

    path = _state_path(ctx)
    if not path.exists():
        raise CliError(f"no job in context {ctx or current_context()!r} ({path} is "
                       "missing): run `regency apply module.attr` first")
    return job_load(path)


# -- apply, kill, context ----------
def _apply(args: argparse.Namespace) -> int:
    from ._exec_actor import ExecActor

    ctx = current_context()
    folder = _ctx(ctx)
    spec = args.spec
    if spec is None:
        try:
            spec = (folder / "spec").read_text().strip()
        except OSError:
            raise CliError(f"no job spec for context {ctx!r}: give one, e.g. "
                           "`regency apply jobs.train`") from None
    job = _load_spec(spec)
    if getattr(job, "_auto_name", False) and ctx != "default":
        job.name = f"{job.name}-{ctx}"  # contexts of one directory never share workers
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec").write_text(spec + "\n")
    t0 = time.monotonic()
    state = job.state(cached_path=str(_state_path(ctx)))
    _link_current(ctx)
    first = next(iter(state._hosts.values()))
    procs = first.spawn_procs(name="ready")
    procs.spawn("ready", ExecActor).where.call().get(timeout=120)
    procs.stop().get(timeout=60)
    print(f"Job is ready ({time.monotonic() - t0:.1f}s): {job.status}, meshes "
          + ", ".join(f"{n} {dict(m.extent)}" for n, m in state._hosts.items()), flush=True)
    return 0


def _kill(args: argparse.Namespace) -> int:
    ctx = args.name or current_context()
    job = _loaded_job(ctx)
    job.kill()
    _state_path(ctx).unlink(missing_ok=True)
    print(f"killed the job of context {ctx!r}", flush=True)
    return 0


def _context(args: argparse.Namespace) -> int:
    ROOT.mkdir(exist_ok=True)
    if args.action == "ls":
        here = current_context()
        names = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and p.name != "logs"
                       and p.name != "batch")
        for name in names or [here]:
            spec = (ROOT / name / "spec")
            state = "running" if (ROOT / name / "state.pkl").exists() else "-"
            text = spec.read_text().strip() if spec.exists() else "-"
            print(f"{'*' if name == here else ' '} {name:20s} {state:8s} {text}")
        return 0
    if not args.name:
        raise CliError(f"regency context {args.action} needs a NAME")
    folder = _ctx(args.name)
    if args.action == "create":
        if folder.exists():
            raise CliError(f"context {args.name!r} exists already ({folder}); "
                           f"`regency context use {args.name}`")
        folder.mkdir(parents=True)
        if args.spec:
            (folder / "spec").write_text(args.spec + "\n")
        _link_current(args.name)
    elif args.action == "use":
        if not folder.is_dir():
            raise CliError(f"no context {args.name!r}; `regency context create {args.name}`")
        _link_current(args.name)
    elif args.action == "rm":
        if not folder.is_dir():
            raise CliError(f"no context {args.name!r}")
        if (folder / "state.pkl").exists():
            _loaded_job(args.name).kill()
        shutil.rmtree(folder)
        if current_context() == args.name:
            (ROOT / "current").unlink(missing_ok=True)
            link = ROOT / "job_state.pkl"
            if link.is_symlink():
                link.unlink()
    print(f"context {args.name}: {args.action} done; current: {current_context()}", flush=True)
    return 0


# -- exec and shell ----------
def _pairs(items: list[str], what: str, conv: Any = str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        for part in item.split(","):
            key, sep, value = part.partition("=")
            if not sep or not key:
                raise CliError(f"{what} {part!r}: expected KEY=VALUE")
            try:
                out[key] = conv(value)
            except ValueError:
                raise CliError(f"{what} {part!r}: {value!r} is not a number") from None
    return out


def _target_procs(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The job, its chosen host mesh and fresh procs for this command."""
    job = _loaded_job()
    state = job.state(cached_path=str(_state_path()))
    name = args.mesh or next(iter(state._hosts))
    hosts = getattr(state, name)
    per_host = _pairs(args.per_host, "--per-host", int)
    return job, hosts, hosts.spawn_procs(per_host=per_host, name=args.label)


def _exec(args: argparse.Namespace) -> int:
    from ._exec_actor import ExecActor

    command = list(args.argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CliError("regency exec: no command; e.g. `regency exec --all -- hostname`")
    if args.spmd:
        return _exec_spmd(args, command)
    text = command[0] if len(command) == 1 else shlex.join(command)
    env = _pairs(args.env, "-e")
    workdir = args.workdir or os.getcwd()
    _job, _hosts, procs = _target_procs(args)
    try:
        actors = procs.spawn("exec", ExecActor)
        target = _choose(args, actors, procs)
        codes = target.run.call(text, env, workdir).get(timeout=args.timeout)
    finally:
        procs.stop().get(timeout=60)
    return _summarise(sorted(((dict(w), int(c)) for w, c in codes.values()),
                             key=lambda wc: list(wc[0].values())))


def _exec_spmd(args: argparse.Namespace, command: list[str]) -> int:
    """Run a torchrun-style script on every proc (``--per-host gpus=N``: nproc-per-node)."""
    from ..spmd import run_spmd

    if args.point or args.one:
        raise CliError("--spmd runs on every proc: drop --point/--one")
    env = _pairs(args.env, "-e")
    _job, _hosts, procs = _target_procs(args)
    try:
        codes = run_spmd(procs, command, env=env, timeout=args.timeout)
    finally:
        procs.stop().get(timeout=60)
    return _summarise([(dict(p), int(c)) for p, c in codes.items()])


def _choose(args: argparse.Namespace, actors: Any, procs: Any) -> Any:
    if args.point:
        point = _pairs(args.point, "--point", int)
        try:
            return actors.slice(**point)
        except Exception as exc:  # noqa: BLE001 - reworded for the command line
            raise CliError(f"--point {point}: not a point of {dict(procs.extent)}: {exc}"
                           ) from None
    if args.all:
        return actors
    return actors.slice(**dict.fromkeys(procs.extent.labels, 0))


def _summarise(results: list[tuple[dict[str, int], int]]) -> int:
    """Print every rank's exit status; the worst (signals as 128+N)."""
    worst = 0
    for point, code in results:
        shown = f"killed by signal {-code}" if code < 0 else f"exit {code}"
        print(f"regency exec: {point}: {shown}", file=sys.stderr, flush=True)
        worst = max(worst, 128 - code if code < 0 else code)
    return worst


def _shell(args: argparse.Namespace) -> int:
    from .._job._shell import shell

    env = _pairs(args.env, "-e")
    job = _loaded_job()
    state = job.state(cached_path=str(_state_path()))
    hosts = getattr(state, args.mesh or next(iter(state._hosts)))
    point = _pairs(args.point, "--point", int) if args.point else \
        dict.fromkeys(hosts.extent.labels, 0)
    try:
        host = hosts.slice(**point)
    except Exception as exc:  # noqa: BLE001 - reworded for the command line
        raise CliError(f"--point {point}: not a host of {dict(hosts.extent)}: {exc}") from None
    if host.size() != 1:
        raise CliError(f"--point {point} names {host.size()} hosts of {dict(hosts.extent)}; "
                       "name one (every dimension)")
    sizes = dict(hosts.extent)
    rank = 0
    for dim, size in sizes.items():  # the host's place in the job's mesh, as exec gives it
        env.setdefault(f"REGENCY_RANK_{dim}", str(point.get(dim, 0)))
        env.setdefault(f"REGENCY_SIZE_{dim}", str(size))
        rank = rank * size + point.get(dim, 0)
    env.setdefault("REGENCY_RANK", str(rank))
    env.setdefault("REGENCY_WORLD_SIZE", str(hosts.size()))
    print(f"regency shell on {point} (exit or Ctrl-D to leave)", file=sys.stderr, flush=True)
    return shell(host, env=env, workdir=args.workdir)


# -- the parsers ----------
def _wrap(run: Any) -> Any:
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return int(run(args))
        except CliError as exc:
            print(f"regency {args.command}: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:
            from ..job import JobError

            if isinstance(exc, JobError):
                print(f"regency {args.command}: {exc}", file=sys.stderr)
                return 2
            raise
    return wrapped


def _help(text: str) -> dict[str, Any]:
    return {"epilog": text, "formatter_class": argparse.RawDescriptionHelpFormatter}


def _target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mesh", default=None, help="the job's host mesh (default: the first)")
    p.add_argument("--point", action="append", default=[], metavar="DIM=N,...",
                   help="run on this point of the procs only")
    p.add_argument("-e", "--env", action="append", default=[], metavar="K=V",
                   help="an environment variable for the command (repeatable)")
    p.add_argument("--workdir", default=None,
                   help="where the command runs (default: this directory's path)")


def add_commands(sub: Any) -> None:
    """Add apply, context, kill, exec and shell to the ``regency`` parser's subcommands."""
    p = sub.add_parser("apply", help="start (or reattach to) the job of the current context",
                       **_help("Example:\n  regency apply jobs.train     # jobs.py: train = "
                               "ProcessJob({'hosts': 2})\n  regency apply                "
                               "# again, with the saved spec"))
    p.add_argument("spec", nargs="?", help="module.attr: a job, or a function returning one")
    p.set_defaults(run=_wrap(_apply))

    p = sub.add_parser("kill", help="stop the job of a context and forget it",
                       **_help("Example:\n  regency kill            # the current context\n"
                               "  regency kill staging    # another one"))
    p.add_argument("name", nargs="?", help="context (default: the current one)")
    p.set_defaults(run=_wrap(_kill))

    p = sub.add_parser("context", help="named job contexts: create, use, rm, ls",
                       **_help("Example:\n  regency context create staging jobs.small\n"
                               "  regency context ls\n  regency context use default\n"
                               "  regency context rm staging      # kills its job"))
    p.add_argument("action", choices=["create", "use", "rm", "ls"])
    p.add_argument("name", nargs="?")
    p.add_argument("spec", nargs="?", help="with create: the context's job spec")
    p.set_defaults(run=_wrap(_context))

    p = sub.add_parser("exec", help="run a command on the job's procs",
                       **_help("Example:\n  regency exec -- hostname              # rank 0\n"
                               "  regency exec --all -e X=1 -- 'echo $X $REGENCY_RANK'\n"
                               "  regency exec --all --per-host gpus=2 -- nvidia-smi -L\n"
                               "  regency exec --point hosts=1 --workdir /tmp -- ls\n"
                               "  regency exec --spmd --per-host gpus=2 -- train.py --lr 0.1\n"
                               "Output is prefixed with each proc's coordinates; every rank's "
                               "exit status\nis summarised on stderr and the worst is ours."))
    pick = p.add_mutually_exclusive_group()
    pick.add_argument("--one", action="store_true", help="rank 0 only (the default)")
    pick.add_argument("--all", action="store_true", help="every proc")
    _target_options(p)
    p.add_argument("--per-host", action="append", default=[], metavar="DIM=N",
                   help="procs per host (default: one)")
    p.add_argument("--spmd", action="store_true",
                   help="run a torchrun-style script (SCRIPT ARGS or -m MODULE ARGS) on every "
                        "proc, torchrun's variables set from the mesh")
    p.add_argument("--timeout", type=float, default=None, help="seconds to wait at most")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                   help="the command (one argument: a bash line)")
    p.set_defaults(run=_wrap(_exec), label="exec")

    p = sub.add_parser("shell", help="an interactive shell on one host of the job",
                       **_help("Example:\n  regency shell                   # host 0\n"
                               "  regency shell --point hosts=1\n"
                               "A terminal there (a pty: editors, Ctrl-C, resizing work); "
                               "exit or Ctrl-D\nleaves, with the shell's exit status."))
    _target_options(p)
    p.set_defaults(run=_wrap(_shell), label="shell", all=False)
