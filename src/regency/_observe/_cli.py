"""``regency query``, ``trace``, ``dashboard`` and ``top``: the observation commands."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from typing import Any

__all__ = ["add_commands"]


def _job_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", default=None,
                   help="job id or path of its .db file (default: the newest job)")
    p.add_argument("--dir", default=None,
                   help="where job databases are (default: observe_dir, .regency/jobs)")


def _db_path(args: argparse.Namespace) -> str:
    from ._jobs import find_db

    return find_db(args.job, args.dir)


def _format_table(cols: list[str], rows: list[tuple[Any, ...]]) -> str:
    text = [[("" if v is None else str(v)) for v in row] for row in rows]
    widths = [min(60, max([len(c)] + [len(r[i]) for r in text])) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v[:w].ljust(w) for v, w in zip(r, widths)) for r in text]
    return "\n".join(lines)


def _query(args: argparse.Namespace) -> int:
    from ._store import connect_readonly, run_query

    try:
        db = connect_readonly(_db_path(args))
        cols, rows = run_query(db, args.sql)
    except (FileNotFoundError, sqlite3.Error) as exc:
        print(f"regency query: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([dict(zip(cols, r)) for r in rows], default=str))
    else:
        print(_format_table(cols, rows))
    return 0


def _trace(args: argparse.Namespace) -> int:
    from ._store import connect_readonly
    from ._trace import trace_window

    try:
        db = connect_readonly(_db_path(args))
    except FileNotFoundError as exc:
        print(f"regency trace: {exc}", file=sys.stderr)
        return 2
    trace = trace_window(db, args.last, args.start_us, args.end_us)
    with open(args.output, "w") as f:
        json.dump(trace, f)
    other = trace["otherData"]
    print(f"wrote {other['calls_and_spans']} calls and spans on {other['procs']} procs to "
          f"{args.output} (open it in https://ui.perfetto.dev)")
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from ._jobs import read_info
    from ._remote_stacks import provider_for
    from ._server import serve_job

    try:
        path = _db_path(args)
        info = read_info(path)  # the controller's own dashboard, if up, stays the one recorded
        server = serve_job(path, args.addr, stacks=provider_for(path),
                           record=not (info and _alive(info["url"])))
    except FileNotFoundError as exc:
        print(f"regency dashboard: {exc}", file=sys.stderr)
        return 2
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.close()
    return 0


def _top(args: argparse.Namespace) -> int:
    try:
        from ._top import run_top
    except ImportError:
        print("regency top needs textual: pip install 'regency[ui]'", file=sys.stderr)
        return 2
    url, token = args.url, args.token
    server = None
    if not url:
        from ._jobs import read_info
        from ._server import serve_job

        try:
            path = _db_path(args)
        except FileNotFoundError as exc:
            print(f"regency top: {exc}", file=sys.stderr)
            return 2
        info = read_info(path)
        if info and _alive(info["url"]):
            url, token = info["url"], info["token"]
        else:  # nobody serves this job: read its database from here
            from ._remote_stacks import provider_for

            server = serve_job(path, "127.0.0.1:0", announce=False, stacks=provider_for(path),
                               record=False)
            url, token = server.url, server.token
    try:
        return run_top(url, token or "", args.interval)
    finally:
        if server is not None:
            server.close()


def _alive(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/api/v1/health", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def add_commands(sub: Any) -> None:
    """Add the observation subcommands to the ``regency`` parser."""
    q = sub.add_parser("query", help="run SQL over a job's event store")
    q.add_argument("sql", help='a statement, e.g. "SELECT * FROM events"')
    q.add_argument("--json", action="store_true", help="print rows as JSON objects")
    _job_args(q)
    q.set_defaults(run=_query)
    t = sub.add_parser("trace", help="write a Chrome/Perfetto trace of calls and spans")
    t.add_argument("-o", "--output", default="regency-trace.json", help="file to write")
    t.add_argument("--last", type=float, default=None,
                   help="only the last SECONDS recorded (default: everything)")
    t.add_argument("--start-us", type=int, default=None, help="window start (epoch µs)")
    t.add_argument("--end-us", type=int, default=None, help="window end (epoch µs)")
    _job_args(t)
    t.set_defaults(run=_trace)
    d = sub.add_parser("dashboard", help="serve a job's web dashboard and JSON API")
    d.add_argument("--addr", default=None, help="HOST:PORT (default 127.0.0.1, a free port)")
    _job_args(d)
    d.set_defaults(run=_dashboard)
    top = sub.add_parser("top", help="watch a running job in the terminal")
    top.add_argument("--url", default=None, help="the job's API (default: from its files)")
    top.add_argument("--token", default=None, help="the API token (with --url)")
    top.add_argument("--interval", type=float, default=1.0, help="refresh every SECONDS")
    _job_args(top)
    top.set_defaults(run=_top)
