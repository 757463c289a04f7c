"""Addresses of listening endpoints, as strings.

* ``unix:@name`` — a Linux abstract Unix socket (no file to clean up);
* ``unix:/path`` — a Unix socket file;
* ``tcp:host:port`` — TCP (``tcp://host:port`` is accepted too).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Address:
    """A parsed address: ``scheme`` is ``"unix"`` or ``"tcp"``."""

    scheme: str
    host: str  # unix: the path ("\0name" for abstract); tcp: the host
    port: int = 0

    @classmethod
    def parse(cls, text: str) -> Address:
        """Parse ``unix:@name``, ``unix:/path``, ``tcp:host:port`` or ``tcp://host:port``."""
        scheme, sep, rest = text.partition(":")
        if not sep:
            raise ValueError(f"address {text!r} has no scheme; expected unix:... or tcp:...")
        rest = rest.removeprefix("//")
        if scheme in ("unix", "ipc"):
            if not rest:
                raise ValueError(f"address {text!r} has an empty path")
            path = "\0" + rest[1:] if rest.startswith("@") else rest
            return cls("unix", path)
        if scheme == "tcp":
            host, sep, port = rest.rpartition(":")
            if not sep or not port.isdigit():
                raise ValueError(f"address {text!r} needs a port: tcp:HOST:PORT")
            return cls("tcp", host.strip("[]") or "0.0.0.0", int(port))
        raise ValueError(f"address {text!r}: unknown scheme {scheme!r} (use unix or tcp)")

    def __str__(self) -> str:
        if self.scheme == "unix":
            return "unix:" + ("@" + self.host[1:] if self.host.startswith("\0") else self.host)
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp:{host}:{self.port}"
