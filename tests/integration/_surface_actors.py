"""Actors for test_surface_names.py."""

from __future__ import annotations

from regency.actor import Actor, context, endpoint


class Killable(Actor):
    @endpoint
    def kill_me(self, reason: str) -> str:
        context().actor_instance.kill(reason)
        return "finished the message first"

    @endpoint
    def ping(self) -> str:
        return "pong"
