"""``parametrize_config`` and ``parametrize_config_pointwise``: tests run under several
configurations. Imports pytest, so only :mod:`regency.config`'s two helpers import this."""

from __future__ import annotations

import functools
import importlib
import inspect
import itertools
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

_PARAM = "_config_overrides"


def _combinations(options: dict[str, Any], pointwise: bool) -> list[dict[str, Any]]:
    if not options:
        raise ValueError("parametrize_config needs at least one key=values argument")
    keys = list(options)
    values = [list(options[key]) for key in keys]
    if pointwise:
        lengths = {key: len(v) for key, v in zip(keys, values)}
        if len(set(lengths.values())) != 1:
            raise ValueError("parametrize_config_pointwise needs sequences of one length; "
                             f"got {lengths}")
        rows = list(zip(*values))
    else:
        rows = list(itertools.product(*values))
    return [dict(zip(keys, row)) for row in rows]


def _wrap(fn: Callable[..., Any],
          configured: Callable[..., AbstractContextManager[Any]]) -> Callable[..., Any]:
    """``fn`` with a first parameter holding the overrides it runs under."""
    sig = inspect.signature(fn)
    first = inspect.Parameter(_PARAM, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    new_sig = sig.replace(parameters=[first, *sig.parameters.values()])
    wrapper: Callable[..., Any]
    if inspect.iscoroutinefunction(fn):
        async def async_wrapper(_config_overrides: dict[str, Any], *args: Any,
                                **kwargs: Any) -> Any:
            with configured(**_config_overrides):
                return await fn(*args, **kwargs)
        wrapper = async_wrapper
    else:
        def sync_wrapper(_config_overrides: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            with configured(**_config_overrides):
                return fn(*args, **kwargs)
        wrapper = sync_wrapper
    functools.update_wrapper(wrapper, fn)
    setattr(wrapper, "__signature__", new_sig)  # noqa: B010
    return wrapper


def parametrize(options: dict[str, Any], *, pointwise: bool,
                configured: Callable[..., AbstractContextManager[Any]]) -> Callable[..., Any]:
    """The decorator both public helpers return."""
    pytest = importlib.import_module("pytest")
    rows = _combinations(options, pointwise)
    ids = ["-".join(f"{k}={v}" for k, v in row.items()) for row in rows]

    def decorator(fn: Callable[..., Any]) -> Any:
        return pytest.mark.parametrize(_PARAM, rows, ids=ids)(_wrap(fn, configured))

    return decorator
