"""Errors and warnings of the data plane.

::

    RegencyError
     └── RDMAError (also a RuntimeError)   a one-sided transfer failed
          └── BufferDroppedError           the buffer was dropped (or never existed there)

Argument problems (too small, not contiguous, read-only, wrong kind) are ``ValueError`` or
``TypeError`` and are raised at once by the call, never through its Future.
"""

from __future__ import annotations

from ..errors import RegencyError


class RDMAError(RegencyError, RuntimeError):
    """A transfer could not be done: owner gone, connection lost, transport refused."""


class BufferDroppedError(RDMAError):
    """The buffer was dropped by its owner (or its owner no longer has it)."""


class RDMATcpFallbackWarning(UserWarning):
    """A pair on one host could not use the single-copy path and fell back to a socket."""


class RDMAReadTransferWarning(UserWarning):
    """Monarch name, kept for compatibility; regency does not emit it."""


class RDMAWriteTransferWarning(UserWarning):
    """Monarch name, kept for compatibility; regency does not emit it."""
