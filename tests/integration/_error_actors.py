"""Actors for the error-text tests: exceptions that pickle at the callee but cannot be rebuilt
at the caller."""

from __future__ import annotations

import importlib
import sys

from regency.actor import Actor, endpoint


class NeedsTwo(Exception):
    """Pickles (as ``NeedsTwo(message)``) but its ``__init__`` needs two arguments."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"code {code}: {detail}")
        self.code = code


class Raiser(Actor):
    @endpoint
    def needs_two(self) -> None:
        raise NeedsTwo(7, "the disk is full")

    @endpoint
    def from_private_module(self, directory: str) -> None:
        """Raise an exception of a module only this proc can import (from ``directory``)."""
        with open(f"{directory}/only_here.py", "w") as f:
            f.write("class OnlyHere(Exception):\n    pass\n")
        sys.path.insert(0, directory)
        module = importlib.import_module("only_here")
        raise module.OnlyHere("made in a module the controller lacks")

    @endpoint
    def still_here(self) -> str:
        return "yes"
