"""``regency``: the command line. Subcommands: ``version``, ``doctor``, ``worker``, ``debug``,
``stack``, the job commands ``apply``, ``context``, ``kill``, ``exec``, ``shell`` (``_jobs``)
and the observation commands ``query``, ``trace``, ``dashboard``, ``top``."""

from __future__ import annotations

import argparse
import os
import platform
import sys


def _version(args: argparse.Namespace) -> int:
    from .. import __version__

    print(f"regency {__version__} (Python {platform.python_version()})")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    """Check that this machine can run regency: spawn a proc, call it, stop it."""
    import time

    from ..actor import Actor, endpoint, this_host

    class _Probe(Actor):
        @endpoint
        def ping(self) -> str:
            return "pong"

    start = time.perf_counter()
    procs = this_host().spawn_procs(per_host={"procs": 1})
    probe = procs.spawn("doctor", _Probe)
    answer = probe.ping.call_one().get(timeout=30)  # type: ignore[attr-defined]
    procs.stop().get(timeout=30)
    took = time.perf_counter() - start
    print(f"spawned a proc, called it ({answer}) and stopped it in {took:.2f}s: OK")
    try:
        import uvloop  # noqa: F401

        print("event loop: uvloop")
    except ImportError:
        print("event loop: asyncio (install uvloop for lower latency)")
    from .._dataplane import doctor_report

    print(doctor_report())
    return 0


def _worker(args: argparse.Namespace) -> int:
    """Serve controllers as a worker host (the job secret comes from the environment)."""
    import logging

    from .._api._workers import run_worker_loop_forever

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s regency worker: %(message)s"))
    logging.getLogger("regency").addHandler(handler)
    logging.getLogger("regency").setLevel(logging.INFO)
    from .. import config
    from .._runtime._secret import SecretError
    from .._runtime._topology import LABELS_ENV, merge_labels

    try:  # what `HostMesh.topology()` and `group_by` read; --label wins over the environment
        os.environ[LABELS_ENV] = merge_labels(os.environ.get(LABELS_ENV, ""), args.label)
        config._check_environment()  # a bad REGENCY_* value: said now, not mid-failure
    except ValueError as exc:
        print(f"regency worker: {exc}", file=sys.stderr)
        return 2
    try:
        return run_worker_loop_forever(address=args.listen, advertise=args.advertise)
    except SecretError as exc:
        print(f"regency worker: {exc}", file=sys.stderr)
        return 2


def _debug(args: argparse.Namespace) -> int:
    """Attach to the paused ranks of a running controller."""
    from .._debug._console import run

    return run(connect=args.connect, pid=args.pid)


def _stack(args: argparse.Namespace) -> int:
    """Print the stacks of every thread of every proc of a running controller."""
    from .._debug._console import stack

    return stack(connect=args.connect, pid=args.pid, timeout=args.timeout)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``regency`` command."""
    parser = argparse.ArgumentParser(prog="regency", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the version").set_defaults(run=_version)
    sub.add_parser("doctor", help="check that procs can be spawned and called").set_defaults(
        run=_doctor)
    worker = sub.add_parser("worker", help="serve controllers as a worker host")
    worker.add_argument("--listen", default="tcp://0.0.0.0:26600",
                        help="address to listen on (tcp://HOST:PORT)")
    worker.add_argument("--advertise", default=None,
                        help="host name or IP other machines use to reach this one")
    worker.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                        help="a label of this host (repeatable), e.g. rack=r1: "
                             "HostMesh.topology() shows it, HostMesh.group_by() arranges by it")
    worker.set_defaults(run=_worker)
    debug = sub.add_parser("debug", help="attach to ranks paused at breakpoint()")
    debug.add_argument("--connect", default=None, metavar="HOST:PORT",
                       help="the controller's address (default: find the one running here); "
                            "the key comes from REGENCY_SECRET or the controller's file")
    debug.add_argument("--pid", type=int, default=None,
                       help="the controller's pid, when several run here")
    debug.set_defaults(run=_debug)
    stacks = sub.add_parser("stack", help="print every proc's Python stacks, grouped")
    stacks.add_argument("--connect", default=None, metavar="HOST:PORT",
                        help="the controller's address (default: the one running here)")
    stacks.add_argument("--pid", type=int, default=None,
                        help="the controller's pid, when several run here")
    stacks.add_argument("--timeout", type=float, default=1.0,
                        help="seconds to wait for each proc's stacks (default 1)")
    stacks.set_defaults(run=_stack)
    from .._observe._cli import add_commands as add_observe_commands
    from ._jobs import add_commands

    add_commands(sub)
    add_observe_commands(sub)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
