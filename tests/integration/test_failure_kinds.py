"""``MeshFailure.kind`` says what sort of failure it was, for ``__supervise__`` code that
respawns after a crash and gives up on a bug: the actor's code raised (``exception``), its
class could not be loaded (``spawn``), its proc exited (``exit``) or was killed
(``signal``)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from _kind_actors import Doomed

from regency.actor import SupervisionError, this_host
from regency.errors import FAILURE_KINDS

T = 30
pytestmark = pytest.mark.timeout(120)


def kind_of(unhandled_failures: Any, mesh: str) -> str:
    [failure] = [f for f in unhandled_failures.wait_for(mesh, T)
                 if f.mesh_name.startswith(mesh)]
    assert failure.kind in FAILURE_KINDS
    return str(failure.kind)


@pytest.mark.parametrize(("how", "kind"), [("raise", "exception"), ("exit", "exit"),
                                           ("kill", "signal")])
def test_a_failure_says_what_sort_it_was(how: str, kind: str, unhandled_failures: Any) -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name=f"kinds_{how}")
    try:
        doomed = procs.spawn(f"doomed_{how}", Doomed)
        pid = doomed.pid.call_one().get(timeout=T)
        if how == "raise":
            doomed.raise_.broadcast()
        elif how == "exit":
            doomed.exit_.broadcast(3)
        else:
            os.kill(pid, signal.SIGKILL)
        assert kind_of(unhandled_failures, f"doomed_{how}") == kind
    finally:
        procs.stop().get(timeout=T)


def test_a_class_the_proc_cannot_load_is_a_spawn_failure(tmp_path: Path,
                                                         unhandled_failures: Any) -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="kinds_spawn")
    procs.initialized.get(timeout=T)
    (tmp_path / "kinds_late_module.py").write_text(
        "from regency.actor import Actor\nclass Late(Actor):\n    pass\n")
    sys.path.insert(0, str(tmp_path))  # here only: the proc started before
    try:
        late = __import__("kinds_late_module").Late
        procs.spawn("late_kind", late)
        assert kind_of(unhandled_failures, "late_kind") == "spawn"
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("kinds_late_module", None)
        procs.stop().get(timeout=T)


def test_a_pending_calls_error_carries_the_kind(unhandled_failures: Any) -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="kinds_pending")
    try:
        doomed = procs.spawn("doomed_pending", Doomed)
        pid = doomed.pid.call_one().get(timeout=T)
        pending = doomed.nap.call_one()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(SupervisionError) as info:
            pending.get(timeout=T)
        assert info.value.kind == "signal" == info.value.failure.kind
    finally:
        procs.stop().get(timeout=T)

