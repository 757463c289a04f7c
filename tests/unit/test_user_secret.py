"""The per-user secret file: made once, private, shared by every process of the user."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from regency._runtime._secret import SecretError, configured_secret, job_secret
from regency._runtime._user_secret import user_secret, user_secret_path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("REGENCY_SECRET", raising=False)
    monkeypatch.delenv("REGENCY_SECRET_FILE", raising=False)
    return tmp_path


def test_made_on_first_use_private_and_stable(home: Path) -> None:
    path = user_secret_path()
    assert path == home / "regency" / "secret" and not path.exists()
    key = user_secret()
    assert len(key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert key == hashlib.sha256(b"regency-user-key-v1\0" + path.read_bytes()).digest()
    assert user_secret() == key  # read back, not made again
    assert os.listdir(path.parent) == ["secret"]  # no temporary file left behind


def test_processes_started_at_once_agree(home: Path) -> None:
    code = "from regency._runtime._user_secret import user_secret; print(user_secret().hex())"
    children = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                 text=True) for _ in range(8)]  # each makes its own attempt
    keys = {child.communicate(timeout=50)[0].strip() for child in children}
    assert all(child.returncode == 0 for child in children)
    assert keys == {user_secret().hex()}
    assert os.listdir(user_secret_path().parent) == ["secret"]


def test_a_file_others_can_read_is_refused(home: Path) -> None:
    user_secret()
    path = user_secret_path()
    path.chmod(0o644)
    with pytest.raises(SecretError, match=r"readable by others.*chmod 600"):
        user_secret()
    with pytest.raises(SecretError, match="attach_to_workers needs the job secret"):
        job_secret("attach_to_workers")


def test_a_short_file_is_refused(home: Path) -> None:
    path = user_secret_path()
    path.parent.mkdir(mode=0o700)
    path.write_bytes(b"short")
    path.chmod(0o600)
    with pytest.raises(SecretError, match="fewer than 32"):
        user_secret()


def test_an_explicit_secret_wins(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert configured_secret() is None
    assert job_secret("a worker") == user_secret()
    monkeypatch.setenv("REGENCY_SECRET", "explicit")
    assert job_secret("a worker") == configured_secret() != user_secret()
