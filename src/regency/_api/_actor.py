"""``Actor`` and the decorators that make its methods endpoints."""

from __future__ import annotations

import functools
import inspect
import logging
from abc import ABC
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from ._not_a_mesh import NotAMesh

if TYPE_CHECKING:
    from ..errors import MeshFailure

__all__ = ["Actor", "EndpointProperty", "NotAnEndpoint", "concurrent_endpoint", "endpoint"]

F = TypeVar("F", bound=Callable[..., Any])


class Actor(NotAMesh, ABC):
    """Base class of user actors (an ``ABC``, as Monarch's: a subclass that leaves an
    ``abc.abstractmethod`` unimplemented cannot be constructed, so its spawn fails).

    Subclass it and mark public methods with ``@endpoint``. An actor handles one message at
    a time. A class whose endpoints are all plain ``def`` is a *sync* actor and runs on a
    thread of its own (a blocking ``.get()`` inside it is fine); one with ``async def``
    endpoints (or none) is an *async* actor and runs on its proc's event loop.

    Optional hooks: ``__cleanup__(self, exc)`` runs when the actor stops (``exc`` is the
    original exception on an error stop, else None); ``__supervise__(self, failure)``
    receives failures of meshes this actor spawned and returns True when it handled them.
    """

    def __cleanup__(self, exc: BaseException | None) -> Any:
        """Runs once when the actor stops (``exc``: the original exception of an error
        stop, else None). Does nothing here: override it (``async def`` in an async
        actor); ``super().__cleanup__(exc)`` works from any subclass, as in Monarch."""
        return None

    def __supervise__(self, failure: MeshFailure) -> Any:
        """Receives a failure of a mesh this actor spawned; return True when handled.
        Returns None here (not handled: the failure goes on up), as Monarch's does, so an
        override may end with ``return super().__supervise__(failure)``."""
        return None

    @functools.cached_property
    def logger(self) -> logging.Logger:
        """A logger named after the actor class (its ``__name__``), at level DEBUG: what
        Monarch gives, so a ported program's logging setup finds the same loggers."""
        lgr = logging.getLogger(type(self).__name__)
        lgr.setLevel(logging.DEBUG)
        return lgr


class EndpointProperty:
    """What ``@endpoint`` puts on the class: the function plus its messaging options."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        explicit_response_port: bool = False,
        concurrent: bool = False,
        propagate: Any = None,
        instrument: bool = True,
    ) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.explicit_response_port = explicit_response_port
        self.concurrent = concurrent
        self.propagate = propagate
        self.instrument = instrument
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        return self.fn.__get__(obj, objtype)  # inside the actor: a plain bound method

    def signature(self) -> inspect.Signature:
        """The signature callers bind against (without ``self`` or the response port)."""
        params = list(inspect.signature(self.fn).parameters.values())[1:]
        if self.explicit_response_port:
            params = params[1:]
        return inspect.Signature(params)


class NotAnEndpointError(RuntimeError, AttributeError):
    """A method that is not an endpoint was called through a mesh: a ``RuntimeError``, as
    Monarch raises for calling it, and an ``AttributeError``, as Monarch raises for its
    adverbs (``mesh.helper.call()``)."""


class NotAnEndpoint:
    """A public method of a spawned mesh that is not an endpoint: calling it explains why."""

    def __init__(self, mesh: Any, name: str) -> None:
        self._mesh = mesh
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        cls = self._mesh._class_name
        raise NotAnEndpointError(
            f"Actor {cls}.{self._name} is not annotated as an endpoint. To call it as one, "
            f"add a @endpoint decorator to it, or wrap it: as_endpoint(mesh.{self._name}).call(...)"
        )

    def __getattr__(self, attr: str) -> Any:
        if attr in ("call", "call_one", "choose", "stream", "broadcast"):
            self()
        raise AttributeError(attr)


@overload
def endpoint(method: F) -> F: ...
@overload
def endpoint(
    method: None = None,
    *,
    propagate: Any = None,
    explicit_response_port: bool = False,
    instrument: bool = True,
) -> Callable[[F], F]: ...
def endpoint(
    method: Callable[..., Any] | None = None,
    *,
    propagate: Any = None,
    explicit_response_port: bool = False,
    instrument: bool = True,
) -> Any:
    """Mark an actor method as an endpoint: callable on meshes with the messaging adverbs.

    Use it bare (``@endpoint``) or with options. With ``explicit_response_port=True`` the
    method takes a ``Port`` right after ``self`` and answers with ``port.send(value)``.
    """

    def wrap(fn: Callable[..., Any]) -> Any:
        return EndpointProperty(fn, explicit_response_port=explicit_response_port,
                                propagate=propagate, instrument=instrument)

    return wrap(method) if method is not None else wrap


def concurrent_endpoint(
    method: Callable[..., Any] | None = None,
    *,
    propagate: Any = None,
    explicit_response_port: bool = False,
    instrument: bool = True,
) -> Any:
    """An async endpoint whose body runs as a task, so the actor takes the next message at once.

    Bodies from one sender start in order. Do not stack it with ``@endpoint``.

    Raises:
        ValueError: the method is not ``async def``.
    """

    def wrap(fn: Callable[..., Any]) -> Any:
        if isinstance(fn, EndpointProperty):  # Monarch's words, then ours
            raise ValueError(
                "concurrent_endpoint does not wrap @endpoint; pass endpoint options to "
                f"@concurrent_endpoint (on {fn.name}: remove the inner decorator)")
        if not inspect.iscoroutinefunction(fn):
            raise ValueError(
                f"concurrent_endpoint can only wrap async endpoints: {fn.__qualname__} is a "
                "sync def; make it `async def`, or use @endpoint")
        return EndpointProperty(fn, explicit_response_port=explicit_response_port,
                                concurrent=True, propagate=propagate, instrument=instrument)

    return wrap(method) if method is not None else wrap


def endpoints_of(cls: type) -> dict[str, EndpointProperty]:
    """The endpoints of an actor class, including inherited ones."""
    found: dict[str, EndpointProperty] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, EndpointProperty):
                found[name] = value
            elif name in found:
                del found[name]
    return found


def is_async_actor(cls: type) -> bool:
    """Whether ``cls`` is an async actor; raises ValueError if it mixes sync and async."""
    eps = endpoints_of(cls)
    kinds = {ep.is_async for ep in eps.values()}
    if len(kinds) > 1:
        sync = sorted(n for n, e in eps.items() if not e.is_async)
        asyn = sorted(n for n, e in eps.items() if e.is_async)
        raise ValueError(
            f"{cls.__qualname__} mixes both async and sync endpoints (sync: {sync}, async: "
            f"{asyn}); make them all `def` or all `async def`."
        )
    return not eps or kinds == {True}
