"""Setting a process up as an owner of buffers: its data-plane server and its ``drop`` handler.

Done lazily, when the process registers its first buffer (procs import the data plane only
if they use it). Kept per runtime: after ``shutdown_context()`` a new runtime (new job secret)
gets a new server.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .._runtime import _messages as m
from .._runtime._runtime import Runtime
from .._transport import Address
from ._registry import registry
from ._server import DataServer

__all__ = ["ensure_owner"]

_lock = threading.Lock()
_KEY = "dataplane_server"
_last: list[DataServer] = []  # the server of the previous runtime, closed when replaced


def _tcp_host(rt: Runtime) -> str:
    host = os.environ.get("REGENCY_RDMA_TCP_HOST")
    if host:
        return host
    if rt.address.startswith("tcp:"):
        return Address.parse(rt.address).host or "0.0.0.0"
    return "127.0.0.1"  # a job on Unix sockets lives on one host


def ensure_owner(rt: Runtime) -> DataServer:
    """The data-plane server of this process (started, with the handlers, on first use)."""
    server: DataServer | None = rt.extra.get(_KEY)
    if server is not None and server.pid == os.getpid():
        return server
    with _lock:
        server = rt.extra.get(_KEY)
        if server is None or server.pid != os.getpid():
            for old in _last:
                old.close()
            server = DataServer(rt.secret, registry(), job=rt.job, tcp_host=_tcp_host(rt))
            _last[:] = [server]
            rt.sys_handlers["rdma_drop"] = lambda msg: _on_drop(rt, msg)
            rt.extra[_KEY] = server
    return server


def _on_drop(rt: Runtime, msg: dict[str, Any]) -> None:
    found = registry().drop(msg["reg_id"], msg["key"])
    rt.send_reply(msg["port"], None, m.OK, found)
