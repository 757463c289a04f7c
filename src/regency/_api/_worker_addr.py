"""Monarch's worker address forms, read into what regency listens on and dials.

A worker address may be:

* a channel URL, ``tcp://HOST:PORT`` (``tcp://*:PORT`` listens on every interface);
* a ProcAddr, ``PROC_ID@CHANNEL`` such as ``service<2MuAHeDjLCEd>@tcp://host:4444``: the proc
  identity is Monarch's; regency has one worker per address and drops it;
* a bind alias, ``tcp://ADVERTISED:PORT@tcp://BIND:PORT``: serve on BIND, be known (and
  dialled) as ADVERTISED.

Workers listen on tcp only: ``ipc://`` and ``inproc://`` name one machine or one process,
and ``metatls://`` is TLS, which regency takes from its configuration (``tls_cert``...).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._transport import Address

__all__ = ["WorkerAddress", "dial_address", "parse_worker_address"]


@dataclass(frozen=True)
class WorkerAddress:
    """Where a worker listens (``bind``) and the address others dial (``dial``)."""

    bind: Address
    dial: Address
    advertise: str | None


def _strip_proc_id(text: str) -> str:
    head, sep, rest = text.partition("@")
    if sep and "://" not in head and ":" not in head:
        return rest
    return text


def _channel(text: str, whole: str) -> Address:
    scheme = text.partition(":")[0]
    if scheme in ("ipc", "inproc", "unix"):
        raise ValueError(f"worker address {whole!r}: a worker listens on tcp (other machines "
                         f"must reach it); {scheme}:// is not served. Use tcp://HOST:PORT")
    if scheme == "metatls":
        raise ValueError(f"worker address {whole!r}: use tcp://; regency's TLS comes from its "
                         "configuration (tls_cert, tls_key, tls_ca or REGENCY_TLS_*)")
    text = text.replace("://*:", "://0.0.0.0:", 1)
    try:
        addr = Address.parse(text)
    except ValueError as exc:
        raise ValueError(f"worker address {whole!r}: {exc}") from None
    if addr.scheme != "tcp":
        raise ValueError(f"worker address {whole!r}: a worker listens on tcp://HOST:PORT")
    return addr


def parse_worker_address(text: str) -> WorkerAddress:
    """Read any of Monarch's worker address forms (see the module docstring).

    Raises:
        ValueError: the form is unknown or not served by regency; the text says which.
    """
    if not isinstance(text, str) or not text:
        raise ValueError(f"a worker address must be a non-empty string, got {text!r}")
    rest = _strip_proc_id(text.strip())
    left, sep, right = rest.partition("@")
    if sep:
        dial = _channel(left, text)
        bind = _channel(right, text)
        return WorkerAddress(bind=bind, dial=dial, advertise=dial.host)
    addr = _channel(rest, text)
    wildcard = addr.host in ("0.0.0.0", "::", "")
    return WorkerAddress(bind=addr, dial=addr, advertise=None if wildcard else addr.host)


def dial_address(worker: object) -> str:
    """The address to dial for ``worker``: any form above, or a Future resolving to one."""
    get = getattr(worker, "get", None)
    if not isinstance(worker, str) and callable(get):
        worker = get()
    if not isinstance(worker, str):
        raise TypeError(f"a worker must be an address string or a Future of one, got "
                        f"{type(worker).__name__}")
    return str(parse_worker_address(worker).dial)
