"""@endpoint, @concurrent_endpoint and actor kinds, without processes."""

from __future__ import annotations

import logging

import pytest

from regency._api._actor import (
    EndpointProperty,
    endpoints_of,
    is_async_actor,
)
from regency.actor import Actor, concurrent_endpoint, endpoint


class Sync(Actor):
    @endpoint
    def a(self, x: int, y: int = 2) -> int:
        return x + y

    def helper(self) -> int:
        return 1


class Async(Actor):
    @endpoint
    async def a(self) -> None: ...

    @concurrent_endpoint
    async def c(self) -> None: ...


class Child(Sync):
    @endpoint(explicit_response_port=True)
    def b(self, port: object, z: int) -> None: ...


def test_endpoints_are_collected_with_inheritance() -> None:
    assert set(endpoints_of(Child)) == {"a", "b"}
    assert isinstance(Child.__dict__["b"], EndpointProperty)
    assert list(Child.__dict__["b"].signature().parameters) == ["z"]
    assert list(Sync.__dict__["a"].signature().parameters) == ["x", "y"]


def test_inside_the_actor_an_endpoint_is_a_plain_method() -> None:
    assert Sync().a(1) == 3


def test_actor_kinds() -> None:
    assert not is_async_actor(Sync)
    assert is_async_actor(Async)
    assert is_async_actor(type("Empty", (Actor,), {}))


def test_mixing_sync_and_async_is_rejected() -> None:
    class Mixed(Actor):
        @endpoint
        def s(self) -> None: ...

        @endpoint
        async def a(self) -> None: ...

    with pytest.raises(ValueError, match="mixes both async and sync endpoints"):
        is_async_actor(Mixed)


def test_concurrent_endpoint_needs_async_and_no_stacking() -> None:
    with pytest.raises(ValueError, match="concurrent_endpoint can only wrap async endpoints"):
        concurrent_endpoint(lambda self: None)

    async def f(self: object) -> None: ...

    with pytest.raises(ValueError, match="concurrent_endpoint does not wrap @endpoint"):
        concurrent_endpoint(endpoint(f))
    assert Async.__dict__["c"].concurrent


def test_the_concurrent_submodule_is_monarchs() -> None:
    """``regency.actor.concurrent`` as ``monarch.actor.concurrent``: the same decorator."""
    import regency.actor
    from regency.actor.concurrent import concurrent_endpoint as from_submodule

    assert from_submodule is regency.actor.concurrent_endpoint
    with pytest.raises(ValueError, match=r"^concurrent_endpoint can only wrap async endpoints"):
        from_submodule(lambda self: None)


def test_an_actors_logger_is_named_after_its_class_at_debug_level() -> None:
    """As Monarch's: ``logging.getLogger("Trainer")`` configures a Trainer's logger."""

    class Trainer(Actor):
        pass

    logger = Trainer().logger
    assert logger is logging.getLogger("Trainer")
    assert logger.level == logging.DEBUG
