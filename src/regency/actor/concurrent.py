"""``regency.actor.concurrent``, as ``monarch.actor.concurrent``: ``concurrent_endpoint``.

An async endpoint whose body runs as a task on the actor's loop, so the actor takes its
next message at once. It refuses sync methods and stacking on ``@endpoint`` with Monarch's
errors.
"""

from __future__ import annotations

from .._api._actor import concurrent_endpoint as concurrent_endpoint

__all__ = ["concurrent_endpoint"]
