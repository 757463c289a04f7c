"""``RankRespawned``: an elastic mesh's dead proc replaced by a new one (pure machine)."""

from __future__ import annotations

import pytest

from regency._supervision import (
    CallStarted,
    InvalidTransition,
    MeshSpawned,
    MeshStopped,
    ProcExited,
    RankRespawned,
    SupervisionState,
)


def _two_meshes() -> SupervisionState:
    st = SupervisionState()
    st.handle(MeshSpawned("p-1", None, "proc", "p", {0: "a0", 1: "a1"}, cause_id="s0"),
              MeshSpawned("w-1", None, "actor", "w", {0: "a0", 1: "a1"}, "T", cause_id="s1"))
    return st


def test_members_move_to_the_new_proc_and_run_again() -> None:
    st = _two_meshes()
    st.handle(ProcExited("a1", "was killed by signal 9", False, 9, "h", cause_id="x"))
    assert st.check_call("w-1", [1], "step") is not None
    assert st.handle(RankRespawned("a1", "b1", cause_id="r")) == []
    assert st.check_call("w-1", [0, 1], "step") is None
    assert st.failure_of("w-1", 1) is None
    assert st.verdicts().call_refusal("w-1", [(1, "b1")]) is None
    # the old address stays dead; a call started on the new one is accepted
    assert st.handle(CallStarted(1, "w-1", frozenset({1}), "step", cause_id="c")) == []
    # the new incarnation fails like any member, and is reported again
    out = st.handle(ProcExited("b1", "was killed by signal 9", False, 10, "h", cause_id="y"))
    assert out, "the second death is reported"
    assert st.check_call("w-1", [1]) is not None


def test_only_a_dead_proc_is_replaced_and_stopped_meshes_stay_stopped() -> None:
    st = _two_meshes()
    with pytest.raises(InvalidTransition, match="not known to be dead"):
        st.handle(RankRespawned("a1", "b1", cause_id="r"))
    st.handle(MeshStopped("w-1", "done", cause_id="s"),
              ProcExited("a1", "was killed by signal 9", False, 9, "h", cause_id="x"),
              RankRespawned("a1", "b1", cause_id="r"))
    assert st.check_call("w-1", [1]) is not None  # stopped: stays refused
    assert st.check_call("p-1", [1]) is None  # the proc mesh runs again
    with pytest.raises(InvalidTransition, match="in use already"):
        st.handle(ProcExited("a0", "was killed", False, 8, "h", cause_id="z"),
                  RankRespawned("a0", "b1", cause_id="r2"))
