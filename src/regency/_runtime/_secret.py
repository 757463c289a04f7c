"""The job secret: from ``REGENCY_SECRET`` or ``REGENCY_SECRET_FILE``, else the user's own.

Never from the command line, where ``ps`` would show it. With neither variable set, the
controller and workers use this user's secret file (``_user_secret``, made on first use), so
attaching to workers of the same user needs no configuration and stays authenticated; the
controller hands the key to its procs through an inherited channel.

The handshake key is derived from what is configured (ADR 0016):

* Text (``REGENCY_SECRET``, or a file of text) may be a human-chosen password: it goes
  through scrypt (N=2**14, r=8, p=1: 16 MiB and about 50 ms, once per process, cached), with
  a salt of ``REGENCY_SECRET_SALT`` (default ``regency``; set it per job, to the job name
  say, so that one precomputed table does not serve every deployment).
* A ``REGENCY_SECRET_FILE`` that holds at least 32 bytes and is not text (one byte or more
  outside printable ASCII: what ``head -c 32 /dev/urandom`` makes, with certainty but for a
  chance of 1e-14) is taken as high-entropy: one SHA-256, no slow KDF.
"""

from __future__ import annotations

import functools
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
                raw = f.read()
        except OSError as exc:
            raise SecretError(f"cannot read REGENCY_SECRET_FILE={path}: {exc}") from exc
        if high_entropy(raw):  # random bytes, taken whole
            return hashlib.sha256(b"regency-key-v2\0" + raw).digest()
        raw = raw.strip()  # text: a trailing newline is not part of the password
        if not raw:
            raise SecretError(f"REGENCY_SECRET_FILE={path} is empty")
        return derive_key(raw, _salt())
    if text is None:
        return None
    if not text.strip():
        raise SecretError("REGENCY_SECRET is set but empty")
    return derive_key(text.strip().encode(), _salt())


#: scrypt's cost: 2**14 blocks of 128 * r bytes (16 MiB), about 50 ms on one core.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 14, 8, 1


def high_entropy(raw: bytes) -> bool:
    """True for a key file that is random bytes, not text: 32 bytes or more, at least one
    of them outside printable ASCII and whitespace."""
    return len(raw) >= 32 and any(b > 126 or (b < 32 and b not in b"\t\n\r") for b in raw)


def _salt() -> bytes:
    return ("regency-kdf-v2\0" + (os.environ.get("REGENCY_SECRET_SALT") or "regency")).encode()


@functools.lru_cache(maxsize=4)
def derive_key(secret: bytes, salt: bytes) -> bytes:
    """The 32-byte handshake key for a human-chosen ``secret`` (scrypt; cached)."""
    return hashlib.scrypt(secret, salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                          maxmem=64 << 20, dklen=32)


def require_secret(what: str) -> bytes:
    """The configured secret, or a clear error saying how to set one."""
    secret = configured_secret()
    if secret is None:
        raise SecretError(
            f"{what} needs the job secret: set REGENCY_SECRET (or REGENCY_SECRET_FILE, a file "
            "holding it) to the same value on the controller and on every worker"
        )
    return secret


def job_secret(what: str) -> bytes:
    """The configured secret, else this user's secret file (made on first use).

    Authentication stays on with nothing configured: controller and workers of one user on
    one machine (or sharing a home directory) read the same private file.
    """
    secret = configured_secret()
    if secret is not None:
        return secret
    from ._user_secret import user_secret

    try:
        return user_secret()
    except SecretError as exc:
        raise SecretError(
            f"{what} needs the job secret and {exc}; set REGENCY_SECRET (or "
            "REGENCY_SECRET_FILE, a file holding it) to the same value on the controller and "
            "on every worker") from exc
