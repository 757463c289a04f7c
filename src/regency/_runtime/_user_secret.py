"""A per-user job secret for when none is configured: a private file, made on first use.

``$XDG_CONFIG_HOME/regency/secret`` (default ``~/.config/regency/secret``), 32 random bytes,
mode 0600 in a 0700 folder. Every regency process of the same user finds the same file, so
a controller attaches to workers on its machine (or on machines sharing the home folder)
with no configuration, and every connection is still authenticated: other users cannot read
the key. A file that others can read, or that another user owns, is refused.

Creation is race-safe: each process writes a whole file under a temporary name and links it
into place; ``link`` fails when the name exists, so the first one wins and every process
then reads the winner's file, never a half-written one.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from pathlib import Path

__all__ = ["user_secret", "user_secret_path"]

_KEY_BYTES = 32


def user_secret_path() -> Path:
    """Where this user's secret lives."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "regency" / "secret"


def user_secret() -> bytes:
    """The 32-byte handshake key from this user's secret file, creating the file if needed.

    Raises:
        SecretError: the file cannot be made or read, or is not private to this user.
    """
    path = user_secret_path()
    try:
        raw = _read_private(path)
    except FileNotFoundError:
        raw = _create(path)
    except OSError as exc:
        raise _error(f"cannot read the user secret {path}: {exc}") from exc
    return hashlib.sha256(b"regency-user-key-v1\0" + raw).digest()


def _read_private(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise _error(f"the user secret {path} belongs to uid {st.st_uid}, not to this "
                         f"user (uid {os.getuid()}); remove it")
        if st.st_mode & 0o077 or not stat.S_ISREG(st.st_mode):
            raise _error(f"the user secret {path} is readable by others (mode "
                         f"{stat.S_IMODE(st.st_mode):o}); run `chmod 600 {path}`, or remove "
                         "it and let regency make a new one")
        raw = os.read(fd, 4096)
    finally:
        os.close(fd)
    if len(raw) < _KEY_BYTES:
        raise _error(f"the user secret {path} holds {len(raw)} bytes, fewer than "
                     f"{_KEY_BYTES}; remove it and let regency make a new one")
    return raw


def _create(path: Path) -> bytes:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".secret-{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            try:
                os.write(fd, secrets.token_bytes(_KEY_BYTES))
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # atomic, and refuses to replace: the first writer wins
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
        return _read_private(path)
    except OSError as exc:
        raise _error(f"cannot create the user secret {path}: {exc}") from exc


def _error(text: str) -> Exception:
    from ._secret import SecretError  # the error lives with the configured secret

    return SecretError(text)
