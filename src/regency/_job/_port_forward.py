"""``PortForwarder``: TCP forwarding between two proc meshes of the same shape.

Each proc of the *source* mesh listens on an ``address:port`` and forwards every connection
it accepts to ``127.0.0.1:dst_port`` as seen by the proc at the same point of the
*destination* mesh. Bytes travel as ordinary actor messages over the job's authenticated
connections (no extra port is opened between hosts): one channel per direction per
connection, ``("data", bytes)`` chunks, then ``("eof",)``; ``("abort",)`` when one side
fails. Stopping the forwarder stops both meshes' actors, which closes their listeners and
every open connection.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from ..actor import Actor, Channel, Port, PortReceiver, current_rank, endpoint

__all__ = ["PortForwarder"]

_CHUNK = 64 * 1024
PortSpec = int | Callable[[Any], int]
AddressSpec = str | Callable[[Any], str]


def _check_port(what: str, port: object) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"{what} must be a TCP port from 1 to 65535, got {port!r}")
    return port


def _parse_address(address: object) -> tuple[str, int]:
    if not isinstance(address, str):
        raise ValueError(f"src_address must be 'address:port', got {address!r}")
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        raise ValueError(f"src_address {address!r} must be 'address:port'")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"src_address {address!r}: the port is not a number") from None
    return host.strip("[]"), _check_port("src_address's port", number)


async def _pump(reader: asyncio.StreamReader, out: Port[Any]) -> None:
    """Socket -> channel, then an end mark."""
    while data := await reader.read(_CHUNK):
        out.send(("data", data))
    out.send(("eof",))


async def _drain(inbox: PortReceiver[Any], writer: asyncio.StreamWriter) -> None:
    """Channel -> socket, until the other side's end mark."""
    while True:
        msg = await inbox.recv()
        if msg[0] == "data":
            writer.write(msg[1])
            await writer.drain()
        elif msg[0] == "eof":
            if writer.can_write_eof():
                writer.write_eof()
            return
        else:
            raise ConnectionAbortedError("the other end of the forwarded connection failed")


class _Relays:
    """The open connections of one forwarding actor."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
              out: Port[Any], inbox: PortReceiver[Any]) -> None:
        task = asyncio.get_running_loop().create_task(self._relay(reader, writer, out, inbox))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    @staticmethod
    async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     out: Port[Any], inbox: PortReceiver[Any]) -> None:
        try:
            await asyncio.gather(_pump(reader, out), _drain(inbox, writer))
        except (OSError, ConnectionError, RuntimeError):
            try:
                out.send(("abort",))
            except Exception:  # noqa: BLE001 - the other side may be gone already
                pass
        finally:
            writer.close()
            inbox.close()

    def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()


class _ForwardTarget(Actor):
    """On a destination proc: dials the local service for each forwarded connection."""

    def __init__(self) -> None:
        self.port: int | None = None
        self.relays = _Relays()

    @endpoint
    async def configure(self, dst_port: PortSpec) -> None:
        port = dst_port(current_rank()) if callable(dst_port) else dst_port
        self.port = _check_port("dst_port", port)

    @endpoint
    async def open(self, to_source: Port[Any]) -> Port[Any]:
        if self.port is None:
            raise RuntimeError("port forward: the destination was not configured")
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        back, inbox = Channel[Any].open()
        self.relays.start(reader, writer, to_source, inbox)
        return back

    async def __cleanup__(self, exc: BaseException | None) -> None:
        self.relays.close()


class _ForwardSource(Actor):
    """On a source proc: listens, and forwards each connection to its point's target."""

    def __init__(self) -> None:
        self.target: Any = None
        self.server: asyncio.AbstractServer | None = None
        self.relays = _Relays()

    @endpoint
    async def start(self, targets: Any, src_address: AddressSpec) -> str:
        point = current_rank()
        self.target = targets.slice(**dict(point))
        address = src_address(point) if callable(src_address) else src_address
        host, port = _parse_address(address)
        self.server = await asyncio.start_server(self._accept, host, port)
        return address

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                      ) -> None:
        back, inbox = Channel[Any].open()
        try:
            out = await self.target.open.call_one(back)
        except Exception:  # noqa: BLE001 - the service is down: refuse this connection
            writer.close()
            inbox.close()
            return
        self.relays.start(reader, writer, out, inbox)

    async def __cleanup__(self, exc: BaseException | None) -> None:
        if self.server is not None:
            self.server.close()
        self.relays.close()


class PortForwarder(Actor):
    """Forwards TCP ports pointwise from one proc mesh to another (Monarch's PortForwarder).

    Spawn it in this process, call ``forward`` once per forward, and stop it to close them
    all::

        fwd = this_proc().spawn("fwd", PortForwarder)
        fwd.forward.call_one(trainers, 6006, this_proc(), "127.0.0.1:16006").get()
        ...                                  # localhost:16006 reaches trainer 0's :6006
        fwd.stop().get()

    ``dst_port`` and ``src_address`` may be functions of the point (the actor's rank).
    """

    def __init__(self) -> None:
        self.meshes: list[Any] = []

    @endpoint
    async def forward(self, dst_proc_mesh: Any, dst_port: PortSpec, src_proc_mesh: Any,
                      src_address: AddressSpec) -> None:
        """Make each source proc listen on ``src_address`` and forward connections to
        ``127.0.0.1:dst_port`` on the destination proc at the same point.

        Raises:
            ValueError: the meshes differ in shape, or a port or address is malformed.
        """
        if dict(dst_proc_mesh.extent) != dict(src_proc_mesh.extent):
            raise ValueError(f"port forward: the meshes differ in shape: destination "
                             f"{dict(dst_proc_mesh.extent)}, source "
                             f"{dict(src_proc_mesh.extent)}")
        if not callable(dst_port):
            _check_port("dst_port", dst_port)
        if not callable(src_address):
            _parse_address(src_address)
        tag = uuid.uuid4().hex[:8]
        targets = dst_proc_mesh.spawn(f"port_forward_to_{tag}", _ForwardTarget)
        self.meshes.append(targets)
        await targets.configure.call(dst_port)
        sources = src_proc_mesh.spawn(f"port_forward_from_{tag}", _ForwardSource)
        self.meshes.append(sources)
        await sources.start.call(targets, src_address)

    async def __cleanup__(self, exc: BaseException | None) -> None:
        for mesh in reversed(self.meshes):
            try:
                await mesh.stop()
            except Exception:  # noqa: BLE001 - best effort: the procs may be gone
                pass
