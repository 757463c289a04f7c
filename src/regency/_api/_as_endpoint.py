"""``as_endpoint``: use a non-endpoint method of a spawned mesh with the adverbs."""

from __future__ import annotations

import inspect
from typing import Any

from ._actor import NotAnEndpoint
from ._endpoint import Endpoint


class NotAMethodError(ValueError, TypeError):
    """``as_endpoint`` of something that is not a spawned actor's method: a ``ValueError``
    (Monarch's) and a ``TypeError`` (regency's earlier)."""


def as_endpoint(not_an_endpoint: Any, *, propagate: Any = None,
                explicit_response_port: bool = False) -> Endpoint[Any]:
    """Wrap ``mesh.method`` (a method not marked ``@endpoint``) as an Endpoint."""
    method = not_an_endpoint
    if isinstance(method, Endpoint):
        return method
    if not isinstance(method, NotAnEndpoint):
        raise NotAMethodError(f"as_endpoint: expected a method of a spawned actor "
                              f"(mesh.method), got {method!r}")
    mesh = method._mesh
    fn = getattr(mesh._cls, method._name)
    params = list(inspect.signature(fn).parameters.values())[1 + int(explicit_response_port):]
    ep: Endpoint[Any] = Endpoint(mesh, method._name, inspect.Signature(params))
    ep._propagate = propagate
    return ep
