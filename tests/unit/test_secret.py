"""Deriving the handshake key from the configured secret (ADR 0016)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from regency._runtime._secret import configured_secret, derive_key, high_entropy


def test_text_secrets_go_through_scrypt_with_the_salt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REGENCY_SECRET_FILE", raising=False)
    monkeypatch.delenv("REGENCY_SECRET_SALT", raising=False)
    monkeypatch.setenv("REGENCY_SECRET", " winter2026 ")
    key = configured_secret()
    assert key is not None and len(key) == 32
    assert key != hashlib.sha256(b"winter2026").digest()  # not the old, fast derivation
    assert key == derive_key(b"winter2026", b"regency-kdf-v2\0regency")
    monkeypatch.setenv("REGENCY_SECRET_SALT", "job-42")
    assert configured_secret() != key


def test_random_key_files_skip_the_slow_kdf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            ) -> None:
    raw = os.urandom(32)
    while not high_entropy(raw):  # all 32 printable: about 1e-14
        raw = os.urandom(32)
    path = tmp_path / "key"
    path.write_bytes(raw)
    monkeypatch.delenv("REGENCY_SECRET", raising=False)
    monkeypatch.setenv("REGENCY_SECRET_FILE", str(path))
    assert configured_secret() == hashlib.sha256(b"regency-key-v2\0" + raw).digest()
    path.write_text("a human password in a file\n")
    assert configured_secret() == derive_key(b"a human password in a file",
                                             b"regency-kdf-v2\0regency")


def test_high_entropy_rule() -> None:
    assert not high_entropy(b"correct horse battery staple, and more words")
    assert not high_entropy(b"\xff" * 31)
    assert high_entropy(b"a" * 31 + b"\x00")


def test_the_kdf_is_slow_for_guessers_and_fast_enough_to_start() -> None:
    derive_key.cache_clear()
    t0 = time.perf_counter()
    derive_key(b"guess", b"salt")
    once = time.perf_counter() - t0
    t0 = time.perf_counter()
    derive_key(b"guess", b"salt")  # cached: once per process
    assert time.perf_counter() - t0 < 0.001
    assert 0.005 < once < 5.0
