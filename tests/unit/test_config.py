"""regency.config: defaults, environment, configure/configured, durations."""

from __future__ import annotations

import pytest

from regency import config


def test_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.get("max_cast_fanout") == 16
    monkeypatch.setenv("REGENCY_CLEANUP_TIMEOUT", "500ms")
    assert config.get("cleanup_timeout") == pytest.approx(0.5)
    monkeypatch.setenv("REGENCY_PREFIX_WITH_RANK", "false")
    assert config.get("prefix_with_rank") is False


def test_configured_restores() -> None:
    before = config.get("spawn_timeout")
    with config.configured(spawn_timeout="2m") as values:
        assert values["spawn_timeout"] == 120.0
        assert config.get_runtime_config() == {"spawn_timeout": 120.0}
    assert config.get("spawn_timeout") == before
    assert config.get_runtime_config() == {}


def test_unknown_key_and_bad_duration() -> None:
    with pytest.raises(KeyError, match="unknown config key 'nope'"):
        config.configure(nope=1)
    with pytest.raises(ValueError, match="duration"):
        config.configure(cleanup_timeout="soon")
    config.clear_runtime_config()
