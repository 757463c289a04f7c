"""Setting a process up as an owner of buffers: its data-plane server and its ``drop`` handler.

Done lazily, when the process registers its first buffer (procs import the data plane only
if they use it). Kept per runtime: after ``shutdown_context()`` a new runtime (new job secret)
gets a new server.
"""

from __future__ import annotations

import os
import sys
import threading

from .._runtime._runtime import Runtime
from .._transport import Address
from .._wire import _messages as m
from .._wire._messages import RdmaDrop, RdmaTaken
from ._registry import registry
from ._server import DataServer

__all__ = ["ensure_owner"]

_lock = threading.Lock()
_last: list[DataServer] = []  # the server of the previous runtime, closed when replaced


def contact(rt: Runtime) -> str:
    """The address where any peer, on this host or another, reaches this runtime."""
    return str(getattr(rt, "contact", None) or rt.address)


def _tcp_host(rt: Runtime) -> str:
    """Where the TCP data socket listens: the host this runtime is reached at over TCP (its
    own bound TCP address, else its advertised TCP contact), else loopback."""
    host = os.environ.get("REGENCY_RDMA_TCP_HOST")
    if host:
        return host
    for addr in (getattr(rt, "bound_address", ""), contact(rt), rt.address):
        if addr.startswith("tcp:"):
            return Address.parse(addr).host or "0.0.0.0"
    return "127.0.0.1"  # a runtime reached only over Unix sockets: one host


def ensure_owner(rt: Runtime) -> DataServer:
    """The data-plane server of this process (started, with the handlers, on first use)."""
    server: DataServer | None = rt.data_server
    if server is not None and server.pid == os.getpid():
        host = _tcp_host(rt)
        if host != server.tcp_host:  # reachable over TCP since (attach_to_workers)
            with _lock:
                if host != server.tcp_host:
                    server.listen_tcp(host)
        return server
    with _lock:
        server = rt.data_server
        if server is None or server.pid != os.getpid():
            for old in _last:
                old.close()
            server = DataServer(rt.secret, registry(), job=rt.job, tcp_host=_tcp_host(rt))
            _last[:] = [server]
            rt.handle(RdmaDrop, lambda msg: _on_drop(rt, msg))
            rt.handle(RdmaTaken, _on_taken)
            rt.data_server = server
    return server


def _on_drop(rt: Runtime, msg: RdmaDrop) -> None:
    found = registry().drop(msg.reg_id, msg.key)
    rt.send_reply(msg.port, None, m.OK, found)


def _on_taken(msg: RdmaTaken) -> None:
    registry().taken(msg.reg_id, msg.key)


def watch_deaths(rt: Runtime) -> None:
    """Close CUDA mappings of runtimes found gone (once per runtime; for readers of CUDA
    memory)."""
    if _forget_mappings not in rt.death_listeners:
        rt.death_listeners.append(_forget_mappings)


def _forget_mappings(addr: str) -> None:
    """A runtime is gone: close the CUDA mappings of its memory, if this process has any."""
    cuda = sys.modules.get("regency._dataplane._cuda")
    if cuda is not None and cuda.mapping_count():
        cuda.forget_owner(addr)
