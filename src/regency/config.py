"""Runtime configuration: ``configure``, ``configured``, and the values in force.

Every key of Monarch 0.7.0's ``monarch.config`` is accepted, beside regency's own (see
``docs/configuration.md`` for the table). A key's value comes from, in this order:

1. :func:`configure` (or :func:`configured` for a block) in this process;
2. the environment variable ``REGENCY_<KEY>`` (the key in upper case, e.g.
   ``REGENCY_CLEANUP_TIMEOUT=500ms``); for a Monarch key that is another name for a regency
   key, ``REGENCY_<THAT KEY>`` counts too, and the regency name wins if both are set;
3. the key's default.

Durations are seconds (floats); Monarch's ``"30s"``, ``"500ms"``, ``"2m"`` and ``"1h 30m"``
strings are accepted too. Procs spawned later inherit the values in force at spawn time.
An unknown key raises :class:`ConfigKeyError` naming the nearest known key.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ._config_keys import ALIASES, KEYS, Key
from ._config_types import ChannelTransport, Encoding, transport_name

__all__ = [
    "ChannelTransport",
    "ConfigKeyError",
    "ConfigValueError",
    "Encoding",
    "clear_runtime_config",
    "configure",
    "configured",
    "describe",
    "get_global_config",
    "get_runtime_config",
    "parametrize_config",
    "parametrize_config_pointwise",
]

_runtime: dict[str, Any] = {}
_PART = re.compile(r"([0-9]*\.?[0-9]+)\s*([a-z]*)")
_UNITS = {
    "": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "ms": 1e-3, "msec": 1e-3, "us": 1e-6, "usec": 1e-6, "ns": 1e-9, "nsec": 1e-9,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0, "d": 86400.0, "day": 86400.0,
    "days": 86400.0,
}


class ConfigKeyError(KeyError, ValueError):
    """A configuration key that neither regency nor Monarch knows.

    A ``KeyError`` (regency's earlier behaviour) and a ``ValueError`` (Monarch's), so handlers
    written for either catch it."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConfigValueError(ValueError, TypeError):
    """A value a configuration key cannot take: a ``ValueError`` (regency's earlier
    behaviour) and a ``TypeError`` (Monarch's), so handlers written for either catch it."""


def _canonical(key: str) -> str:
    """The key under which ``key``'s value is kept (an alias names its regency key)."""
    if key in ALIASES:
        return ALIASES[key]
    if key not in KEYS:
        near = difflib.get_close_matches(key, list(KEYS), n=1, cutoff=0.5)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ConfigKeyError(
            f"unknown config key {key!r} (invalid configuration key: `{key}`){hint} "
            "Every key: regency.config.describe()"
        )
    return key


def _duration(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError(f"config {key}: {value!r} is not a duration")
    if isinstance(value, (int, float)):
        if value < 0 or value != value:
            raise ValueError(f"config {key}: {value!r} is not a duration >= 0 seconds")
        return float(value)
    text = str(value).strip().lower()
    parts = _PART.findall(text)
    if not parts or _PART.sub("", text).strip() or any(u not in _UNITS for _n, u in parts):
        raise ValueError(f"config {key}: cannot read {value!r} as a duration; use seconds "
                         "(a number) or a string such as '30s', '500ms', '2m' or '1h 30m'")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _boolean(key: str, value: Any) -> bool:
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"config {key}: cannot read {value!r} as true or false")
    return bool(value)


def _integer(key: str, value: Any) -> int:
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"config {key}: {value!r} is not a whole number")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"config {key}: cannot read {value!r} as a whole number") from None
    if number < 0:  # counts and sizes, unsigned in Monarch too
        raise ValueError(f"config {key}: {value!r} is negative; give a whole number >= 0")
    return number


def _encoding(key: str, value: Any) -> Encoding:
    if isinstance(value, Encoding):
        return value
    for member in Encoding:
        if str(value).lower().removeprefix("encoding.") == member.name.lower():
            return member
    raise ValueError(f"config {key}: {value!r} is not an Encoding (Bincode, Json, Multipart)")


def _optional_int(key: str, value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    return _integer(key, value)


_READERS: dict[str, Callable[[str, Any], Any]] = {
    "bool": _boolean,
    "int": _integer,
    "float": lambda key, value: float(value),
    "duration": _duration,
    "str": lambda key, value: str(value),
    "transport": lambda key, value: transport_name(value),
    "encoding": _encoding,
    "optional_int": _optional_int,
}


def _coerce(key: str, value: Any) -> Any:
    """``value`` read as key ``key``'s kind; :class:`ConfigValueError` if it cannot be."""
    try:
        return _READERS[KEYS[key].kind](key, value)
    except ConfigValueError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigValueError(str(exc)) from None


_ENV_NAMES: dict[str, tuple[str, ...]] = {
    key: ("REGENCY_" + key.upper(),
          *("REGENCY_" + alias.upper() for alias, target in ALIASES.items() if target == key))
    for key in KEYS
}


def _from_environment(key: str) -> tuple[str, str] | None:
    """The environment variable that sets ``key`` and its text, if one does."""
    for name in _ENV_NAMES[key]:
        env = os.environ.get(name)
        if env is not None:
            return name, env
    return None


def _from_env_checked(key: str, name: str, text: str) -> Any:
    try:
        return _coerce(key, text)
    except ConfigValueError as exc:
        raise ConfigValueError(f"environment variable {name}={text!r}: {exc}") from None


def get(key: str) -> Any:
    """The value in force for ``key``."""
    if key in _runtime:  # the hot path: a regency key set at run time
        return _runtime[key]
    key = _canonical(key)
    if key in _runtime:
        return _runtime[key]
    env = _from_environment(key)
    return _from_env_checked(key, *env) if env is not None else KEYS[key].default


def _check_environment() -> None:
    """Read every ``REGENCY_<KEY>`` set in the environment now, so that a bad value stops
    regency before it starts anything, naming the variable (not later, in the middle of a
    failure's report).

    Raises:
        ConfigValueError: a variable holds a value its key cannot take.
    """
    for key in KEYS:
        if key not in _runtime:
            env = _from_environment(key)
            if env is not None:
                _from_env_checked(key, *env)


def get_global_config() -> dict[str, Any]:
    """Every key with the value in force (run-time value, else environment, else default).

    Changing the returned dict changes nothing; use :func:`configure`."""
    return {key: get(key) for key in sorted(KEYS)}


def get_runtime_config() -> dict[str, Any]:
    """Only the keys set with :func:`configure` (under regency's name for an alias)."""
    return dict(_runtime)


def clear_runtime_config() -> None:
    """Forget every value set with :func:`configure` (environment and defaults stay)."""
    _runtime.clear()


def configure(**kwargs: Any) -> None:
    """Set configuration values for this process (and procs spawned after).

    Nothing is set unless every value is valid: an unknown key raises
    :class:`ConfigKeyError`, a value of the wrong kind :class:`ConfigValueError` (both a
    ``ValueError`` and a ``TypeError``)."""
    values = {}
    for key, value in kwargs.items():
        canonical = _canonical(key)
        values[canonical] = _coerce(canonical, value)
    _runtime.update(values)


@contextmanager
def configured(**kwargs: Any) -> Iterator[dict[str, Any]]:
    """Set values for the duration of a ``with`` block, then restore the previous ones.

    Yields :func:`get_global_config` as it is inside the block."""
    saved = dict(_runtime)
    configure(**kwargs)
    try:
        yield get_global_config()
    finally:
        _runtime.clear()
        _runtime.update(saved)


def describe(key: str | None = None) -> dict[str, Key]:
    """The table entry (kind, default, what it does here) of ``key``, or of every key."""
    if key is None:
        return dict(sorted(KEYS.items()))
    _canonical(key)
    return {key: KEYS[key]}


def parametrize_config(**config_options: Any) -> Callable[[Callable[..., Any]], Any]:
    """A pytest decorator running the test under every combination of the given values.

    ``@parametrize_config(prefix_with_rank={True, False}, tail_log_lines={0, 5})`` runs the
    test four times, each inside :func:`configured` with one combination."""
    from ._config_pytest import parametrize

    return parametrize(config_options, pointwise=False, configured=configured)


def parametrize_config_pointwise(**config_options: Any) -> Callable[[Callable[..., Any]], Any]:
    """Like :func:`parametrize_config`, taking the sequences in lockstep (``zip``) instead of
    every combination; every sequence must have the same length."""
    from ._config_pytest import parametrize

    return parametrize(config_options, pointwise=True, configured=configured)
