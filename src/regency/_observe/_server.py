"""The JSON HTTP API over a job's database, and the dashboard page it serves.

Served by the controller (config ``dashboard``) or by ``regency dashboard`` in another
process: both read the same SQLite file, read-only. It binds ``dashboard_addr`` (default
``127.0.0.1:0``: loopback, a free port) and every ``/api/v1/`` URL but ``health`` needs the
job's token, as ``Authorization: Bearer <token>`` or ``?token=<token>``. The page itself
(``/``) holds no data; it reads the token from the URL's fragment (``#token=...``), which
browsers never send to the server. Endpoints and shapes: docs/observability.md.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import queue
import secrets
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlparse

from .. import config
from . import _views
from ._jobs import info_path, write_info
from ._store import connect_readonly, run_query
from ._trace import trace_window

__all__ = ["ApiServer", "serve_job", "set_stack_provider"]

log = logging.getLogger("regency.observe")

_STATIC = {"/": ("dashboard.html", "text/html; charset=utf-8"),
           "/index.html": ("dashboard.html", "text/html; charset=utf-8"),
           "/static/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
           "/static/dashboard.css": ("dashboard.css", "text/css; charset=utf-8")}

# -- stack dumps -------------------------------------------------------------------------------
# A controller serving its own dashboard installs ``procs.stacks()``'s machinery here
# (``regency._observe.start_controller``); ``regency dashboard``, a separate process, gives
# its server one that asks the job's controller over a link (``_remote_stacks.py``).
# ``fn(proc_address) -> str`` returns that proc's stacks as text (``regency top``'s ``s`` key
# and the dashboard's stacks button show it as is); it raises ``LookupError`` when the stacks
# cannot be had (answered as 501 ``not_available``).
_stack_provider: Callable[[str], str] | None = None


def set_stack_provider(fn: Callable[[str], str] | None) -> None:
    """Install the function that dumps a proc's stacks for ``/api/v1/stack``."""
    global _stack_provider
    _stack_provider = fn


class _ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _int(query: dict[str, list[str]], key: str, default: int | None) -> int | None:
    values = query.get(key)
    if not values or values[0] == "":
        return default
    try:
        return int(float(values[0]))
    except ValueError:
        raise _ApiError(400, "bad_request", f"{key}={values[0]!r} is not a number") from None


def _str(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


class ApiServer:
    """An HTTP server thread answering for one job's database."""

    def __init__(self, db_path: str, addr: str = "127.0.0.1:0", token: str | None = None,
                 stacks: Callable[[str], str] | None = None) -> None:
        self.db_path = db_path
        self.stacks = stacks  # this server's stack provider (else the process's)
        self.token = token or secrets.token_hex(24)  # hex: never starts with "-" (a CLI option)
        host, _, port = addr.rpartition(":")
        self._pool: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        handler = _make_handler(self)
        self.httpd = ThreadingHTTPServer((host or "127.0.0.1", int(port or 0)), handler)
        self.httpd.daemon_threads = True
        bound_host, bound_port = self.httpd.server_address[:2]
        self.url = f"http://{bound_host!s}:{bound_port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        name="regency-observe-http", daemon=True)

    def start(self) -> ApiServer:
        """Serve on a daemon thread."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()

    @contextlib.contextmanager
    def db(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection to the database, for one request (each request has a
        thread of its own: connections are pooled rather than opened per thread)."""
        try:
            conn = self._pool.get_nowait()
        except queue.Empty:
            conn = connect_readonly(self.db_path)
        try:
            yield conn
        finally:
            self._pool.put(conn)

    def authorized(self, headers: Any, query: dict[str, list[str]]) -> bool:
        """Whether the request carries the token."""
        given = ""
        auth = headers.get("Authorization") or ""
        if auth.startswith("Bearer "):
            given = auth[len("Bearer "):].strip()
        elif query.get("token"):
            given = query["token"][0]
        return hmac.compare_digest(given.encode(), self.token.encode())

    # -- endpoints ----------------------------------------------------------------------------
    def get(self, path: str, query: dict[str, list[str]]) -> Any:
        """The JSON answer to ``GET path``."""
        if path == "/api/v1/stack":
            return self._stack(_str(query, "proc"))
        with self.db() as db:
            return self._get(db, path, query)

    def _get(self, db: sqlite3.Connection, path: str, query: dict[str, list[str]]) -> Any:
        if path == "/api/v1/summary":
            return _views.summary(db)
        if path == "/api/v1/tree":
            return _views.tree(db, _int(query, "log_tail", 5) or 0)
        if path == "/api/v1/events":
            return _views.events(db, _int(query, "since_us", 0) or 0, _str(query, "kind"),
                                 _int(query, "limit", 500) or 500)
        if path == "/api/v1/calls":
            fields = [f for f in (_str(query, "fields") or "").split(",") if f]
            try:
                return _views.calls(db, _int(query, "start_us", None),
                                    _int(query, "end_us", None),
                                    _int(query, "limit", 2000) or 2000, fields or None)
            except ValueError as exc:
                raise _ApiError(400, "bad_request", str(exc)) from None
        if path == "/api/v1/logs":
            return _views.logs(db, _str(query, "proc"), _str(query, "q"),
                               _int(query, "limit", 200) or 200)
        if path == "/api/v1/throughput":
            return _views.throughput(db, _int(query, "window_s", 60) or 60)
        if path == "/api/v1/trace":
            last = _int(query, "last_s", None)
            return trace_window(db, last, _int(query, "start_us", None),
                                _int(query, "end_us", None))
        raise _ApiError(404, "not_found", f"no endpoint {path}; see docs/observability.md")

    def _stack(self, proc: str | None) -> Any:
        if not proc:
            raise _ApiError(400, "bad_request", "give the proc: /api/v1/stack?proc=<address>")
        provider = self.stacks or _stack_provider
        if provider is None:
            raise _ApiError(501, "not_available",
                            "this server cannot dump stacks (no stack provider: see "
                            "regency._observe._server.set_stack_provider)")
        try:
            return {"proc": proc, "stacks": provider(proc)}
        except LookupError as exc:
            raise _ApiError(501, "not_available", str(exc)) from None

    def post(self, path: str, body: bytes) -> Any:
        """The JSON answer to ``POST path``."""
        if path != "/api/v1/query":
            raise _ApiError(404, "not_found", f"no endpoint POST {path}")
        try:
            sql = json.loads(body or b"{}")["sql"]
        except (ValueError, KeyError, TypeError):
            raise _ApiError(400, "bad_request", 'send {"sql": "SELECT ..."}') from None
        try:
            with self.db() as db:
                cols, rows = run_query(db, str(sql))
        except sqlite3.Error as exc:
            raise _ApiError(400, "bad_request", f"query failed: {exc}") from None
        return {"columns": cols, "rows": rows}


def _make_handler(api: ApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "regency-observe/1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("http: " + format, *args)

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, value: Any) -> None:
            self._send(status, json.dumps(value, default=str).encode(), "application/json")

        def _answer(self, fn: Callable[[], Any], query: dict[str, list[str]]) -> None:
            try:
                self._answer_or_fail(fn, query)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away (a page navigated off): nobody to answer

        def _answer_or_fail(self, fn: Callable[[], Any], query: dict[str, list[str]]) -> None:
            try:
                if not api.authorized(self.headers, query):
                    raise _ApiError(401, "unauthorized", "missing or wrong token")
                self._json(200, fn())
            except _ApiError as exc:
                self._json(exc.status, {"error": exc.code, "message": exc.message})
            except (BrokenPipeError, ConnectionResetError):
                raise
            except Exception as exc:  # noqa: BLE001 - answer, never drop the connection
                log.exception("regency: API error")
                self._json(500, {"error": "internal_error", "message": str(exc)})

        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query)
            if url.path in _STATIC:
                name, kind = _STATIC[url.path]
                data = resources.files(__package__).joinpath("static").joinpath(name).read_bytes()
                self._send(200, data, kind)
            elif url.path == "/api/v1/health":
                self._json(200, {"status": "ok"})
            else:
                self._answer(lambda: api.get(url.path, query), query)

        def do_POST(self) -> None:
            url = urlparse(self.path)
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(n, 1 << 20))
            self._answer(lambda: api.post(url.path, body), parse_qs(url.query))

    return Handler


def serve_job(db_path: str, addr: str | None = None, announce: bool = True,
              stacks: Callable[[str], str] | None = None, record: bool = True) -> ApiServer:
    """Serve a job's API and dashboard; with ``record``, writes the address and token next
    to the database (where ``regency top`` looks for them).

    ``stacks`` dumps a proc's stacks for ``/api/v1/stack`` (default: the process's provider,
    set by a controller serving its own job)."""
    server = ApiServer(db_path, addr or str(config.get("dashboard_addr")), stacks=stacks).start()
    if record:
        write_info(db_path, {"url": server.url, "token": server.token, "db": db_path})
    if announce:
        where = f", token in {info_path(db_path)}" if record else ""
        print(f"regency dashboard: {server.url}/#token={server.token}  (API: {server.url}"
              f"/api/v1/{where})", file=sys.stderr)
    return server
