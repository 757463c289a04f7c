"""An endpoint's exception that pickles at the callee but cannot be rebuilt at the caller
still arrives as an ``ActorError``, with the remote type, message and traceback as text."""

from __future__ import annotations

from pathlib import Path

import pytest
from _error_actors import Raiser

from regency.actor import ActorError, this_host

T = 30


@pytest.fixture(scope="module")
def raiser():
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="error-texts")
    yield procs.spawn("raiser", Raiser)
    procs.stop().get(timeout=T)


def test_an_exception_whose_init_needs_more_arguments(raiser) -> None:
    with pytest.raises(ActorError) as info:
        raiser.needs_two.call_one().get(timeout=T)
    err = info.value
    assert isinstance(err.exception, RuntimeError)
    text = str(err.exception)
    assert "_error_actors.NeedsTwo: code 7: the disk is full" in text
    assert "could not be rebuilt here" in text
    assert "raise NeedsTwo(7" in str(err)  # the remote traceback, as text
    assert "needs_two" in err.message
    assert raiser.still_here.call_one().get(timeout=T) == "yes"


def test_an_exception_of_a_module_the_caller_cannot_import(raiser, tmp_path: Path) -> None:
    with pytest.raises(ActorError) as info:
        raiser.from_private_module.call_one(str(tmp_path)).get(timeout=T)
    err = info.value
    text = str(err.exception)
    assert "only_here.OnlyHere: made in a module the controller lacks" in text
    assert "ModuleNotFoundError" in text
    assert "OnlyHere: made in a module the controller lacks" in err.exception_formatted
