"""The job secret for multi-host jobs: from ``REGENCY_SECRET`` or ``REGENCY_SECRET_FILE``.

Never from the command line, where ``ps`` would show it. Local jobs need none: the controller
makes a random one and hands it to its procs through an inherited channel.
"""

from __future__ import annotations

import hashlib
import os

from ..errors import RegencyError


class SecretError(RegencyError, RuntimeError):
    """No usable job secret was configured."""


def configured_secret() -> bytes | None:
    """The job secret from the environment, or None when neither variable is set."""
    text = os.environ.get("REGENCY_SECRET") or None  # empty means unset
    path = os.environ.get("REGENCY_SECRET_FILE")
    if text is None and path:
        try:
            with open(path, "rb") as f:
                raw = f.read().strip()
        except OSError as exc:
            raise SecretError(f"cannot read REGENCY_SECRET_FILE={path}: {exc}") from exc
        if not raw:
            raise SecretError(f"REGENCY_SECRET_FILE={path} is empty")
        return hashlib.sha256(raw).digest()
    if text is None:
        return None
    if not text.strip():
        raise SecretError("REGENCY_SECRET is set but empty")
    return hashlib.sha256(text.strip().encode()).digest()


def require_secret(what: str) -> bytes:
    """The configured secret, or a clear error saying how to set one."""
    secret = configured_secret()
    if secret is None:
        raise SecretError(
            f"{what} needs the job secret: set REGENCY_SECRET (or REGENCY_SECRET_FILE, a file "
            "holding it) to the same value on the controller and on every worker"
        )
    return secret
