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


def test_a_bad_environment_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    config._check_environment()  # nothing set wrong: nothing said
    monkeypatch.setenv("REGENCY_TAIL_LOG_LINES", "abc")
    with pytest.raises(config.ConfigValueError,
                       match=r"environment variable REGENCY_TAIL_LOG_LINES='abc': .*whole"):
        config._check_environment()
    with pytest.raises(config.ConfigValueError, match="REGENCY_TAIL_LOG_LINES"):
        config.get("tail_log_lines")
    with config.configured(tail_log_lines=5):  # set at run time: the environment is not read
        config._check_environment()


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


def test_unknown_key_suggests_the_nearest() -> None:
    with pytest.raises(config.ConfigKeyError, match="did you mean 'cleanup_timeout'") as info:
        config.configure(cleanup_timout="1s")
    assert isinstance(info.value, ValueError) and isinstance(info.value, KeyError)
    assert "invalid configuration key" in str(info.value)  # Monarch's phrase, for match=
    assert config.get_runtime_config() == {}


def test_every_monarch_key_is_accepted_with_its_default() -> None:
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).parents[1] / "data" / "monarch_surface.json").read_text())
    values = config.get_global_config()
    for key in data["config_keys"]:
        assert key in values, key
        entry = config.describe(key)[key]
        assert entry.doc, key
    # Monarch-only keys keep Monarch's default, durations read as seconds.
    assert values["message_delivery_timeout"] == 30.0
    assert values["mesh_admin_addr"] == "[::]:1729"
    assert values["rdma_max_nics_per_buffer"] is None
    assert values["default_encoding"] is config.Encoding.Multipart


def test_monarch_values_are_read_as_monarch_writes_them() -> None:
    with config.configured(message_delivery_timeout="1h 30m", tokio_worker_threads=4,
                           default_encoding=config.Encoding.Json,
                           default_transport=config.ChannelTransport.TcpWithHostname,
                           message_latency_sampling_rate=0.5) as values:
        assert values["message_delivery_timeout"] == 5400.0
        assert values["tokio_worker_threads"] == 4
        assert values["default_encoding"] is config.Encoding.Json
        assert values["default_transport"] == "tcp"
    with pytest.raises(ValueError, match="whole number"):
        config.configure(tail_log_lines="three")
    with pytest.raises(ValueError, match="duration"):
        config.configure(message_delivery_timeout="30 parsecs")


def test_aliases_set_the_regency_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with config.configured(server_heartbeat_interval="2s") as values:
        assert config.get("heartbeat_interval") == 2.0
        assert values["server_heartbeat_interval"] == 2.0
        assert config.get_runtime_config() == {"heartbeat_interval": 2.0}
    monkeypatch.setenv("REGENCY_PENDING_ACTOR_DELIVERY_TIMEOUT", "7s")
    assert config.get("pending_message_timeout") == 7.0
    monkeypatch.setenv("REGENCY_PENDING_MESSAGE_TIMEOUT", "9s")  # regency's name wins
    assert config.get("pending_actor_delivery_timeout") == 9.0


def test_channel_transport() -> None:
    from regency.actor import ChannelTransport as FromActor
    from regency.config import ChannelTransport

    assert FromActor is ChannelTransport
    assert ChannelTransport.Unix.get() is ChannelTransport.Unix
    assert str(ChannelTransport.Tls) == "ChannelTransport.Tls"
    with config.configured(default_transport="tcp://example:1"):
        assert config.get("default_transport") == "tcp"
    with pytest.raises(ValueError, match=r"Meta-internal.*use ChannelTransport\.Unix"):
        config.configure(default_transport=ChannelTransport.MetaTlsWithHostname)
    with pytest.raises(ValueError, match="tls_cert"):
        config.configure(default_transport=ChannelTransport.Tls)
    with pytest.raises(ValueError, match="separate processes"):
        config.configure(default_transport=ChannelTransport.Local)
    assert config.get_runtime_config() == {}


def test_frame_limit_reaches_connections() -> None:
    import socket

    from regency._transport._reader import Reader

    a, b = socket.socketpair()
    try:
        with config.configured(codec_max_frame_length=1234):
            reader = Reader(a, owner=None)  # type: ignore[arg-type]
        assert reader.decoder._max_frame_bytes == 1234
    finally:
        a.close()
        b.close()


@config.parametrize_config(prefix_with_rank={True, False}, tail_log_lines={0})
def test_parametrize_config() -> None:
    assert config.get("tail_log_lines") == 0


@config.parametrize_config_pointwise(tail_log_lines=[1, 2], max_cast_fanout=[3, 4])
def test_parametrize_config_pointwise() -> None:
    assert config.get("max_cast_fanout") == config.get("tail_log_lines") + 2


def test_parametrize_config_needs_options() -> None:
    with pytest.raises(ValueError, match="one length"):
        config.parametrize_config_pointwise(tail_log_lines=[1], max_cast_fanout=[1, 2])
    with pytest.raises(ValueError, match="at least one"):
        config.parametrize_config()


@pytest.mark.parametrize(("key", "value"), [
    ("max_cast_fanout", -1), ("max_cast_fanout", "many"), ("max_cast_fanout", 2.5),
    ("tail_log_lines", -3), ("message_delivery_timeout", "abc"),
    ("message_delivery_timeout", -1.0), ("cleanup_timeout", float("nan")),
])
def test_a_bad_value_is_both_monarchs_type_error_and_a_value_error(key: str, value: object) -> None:
    before = config.get(key)
    with pytest.raises(config.ConfigValueError, match=f"config {key}: ") as raised:
        config.configure(**{key: value})
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, ValueError)
    assert config.get(key) == before  # nothing set
