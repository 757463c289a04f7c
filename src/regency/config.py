"""Runtime configuration: ``configure``, ``configured``, and the values in force.

Every key has a default, may be set from the environment as ``REGENCY_<KEY>`` (upper case)
and may be changed at run time with :func:`configure` or, for a block, :func:`configured`.
Durations are seconds (floats); ``"30s"``, ``"500ms"`` and ``"2m"`` strings are accepted too.
Procs spawned later inherit the values in force at spawn time.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "clear_runtime_config",
    "configure",
    "configured",
    "get_global_config",
    "get_runtime_config",
]

_DEFAULTS: dict[str, Any] = {
    "default_transport": "unix",
    "enable_log_forwarding": True,
    "prefix_with_rank": True,
    "tail_log_lines": 20,
    "spawn_timeout": 30.0,
    "connect_timeout": 30.0,
    "cleanup_timeout": 3.0,
    "stop_actor_timeout": 10.0,
    "pending_message_timeout": 30.0,
    "max_cast_fanout": 16,
    "socket_buffer_bytes": 4 * 1024 * 1024,
    "send_high_water_bytes": 4 * 1024 * 1024,
    "mailbox_high_water_bytes": 4 * 1024 * 1024,
    "loop_send_block_limit": 1.0,
    "shm_min_bytes": 1024 * 1024,
    "shm_pool_bytes": 1024 * 1024 * 1024,
    "fail_fast_exit_deadline": 5.0,
    "malloc_reuse": True,
    "borrow_reads": True,
    "borrow_spin": 0.0001,
    "borrow_spin_busy": False,
    "heartbeat_interval": 0.5,
    "tls_cert": "",
    "tls_key": "",
    "tls_ca": "",
    "host_lost_timeout": 3.0,
    "handshake_timeout": 10.0,
    "handshake_max_pending": 512,
    "handshake_max_per_source": 64,
    # observability (docs/observability.md)
    "observe": False,
    "observe_dir": "",
    "observe_call_rate": 2000,
    "dashboard": False,
    "dashboard_addr": "127.0.0.1:0",
}

_runtime: dict[str, Any] = {}
_DURATION = re.compile(r"^\s*([0-9.]+)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def _coerce(key: str, value: Any) -> Any:
    default = _DEFAULTS[key]
    if isinstance(default, bool):
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true", "yes", "on")
        return bool(value)
    if isinstance(default, float):
        if isinstance(value, str):
            m = _DURATION.match(value)
            if not m:
                raise ValueError(f"config {key}: cannot read {value!r} as a duration")
            return float(m.group(1)) * _UNITS[m.group(2)]
        return float(value)
    if isinstance(default, int):
        return int(value)
    return value


def _check_key(key: str) -> None:
    if key not in _DEFAULTS:
        known = ", ".join(sorted(_DEFAULTS))
        raise KeyError(f"unknown config key {key!r}; known keys: {known}")


def get_global_config() -> dict[str, Any]:
    """All keys with the value in force (runtime override, else environment, else default)."""
    return {key: get(key) for key in _DEFAULTS}


def get_runtime_config() -> dict[str, Any]:
    """Only the keys set with :func:`configure`."""
    return dict(_runtime)


def clear_runtime_config() -> None:
    """Forget every value set with :func:`configure`."""
    _runtime.clear()


def get(key: str) -> Any:
    """The value in force for ``key``."""
    if key in _runtime:
        return _runtime[key]
    _check_key(key)
    env = os.environ.get("REGENCY_" + key.upper())
    return _coerce(key, env) if env is not None else _DEFAULTS[key]


def configure(**kwargs: Any) -> None:
    """Set configuration values for this process (and procs spawned after)."""
    for key, value in kwargs.items():
        _check_key(key)
        _runtime[key] = _coerce(key, value)


@contextmanager
def configured(**kwargs: Any) -> Iterator[dict[str, Any]]:
    """Set values for the duration of a ``with`` block, then restore the previous ones."""
    saved = dict(_runtime)
    configure(**kwargs)
    try:
        yield get_global_config()
    finally:
        _runtime.clear()
        _runtime.update(saved)
