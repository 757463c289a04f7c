"""Behaviours compared side by side with Monarch 0.7.0 (docs/porting-behaviours.md).

The ``match=`` patterns are Monarch's own words for the same failure, so that a ported
``pytest.raises(match=...)`` keeps matching; regency's report follows them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _parity_actors import AsyncOwner, Faulty, Owner, RankAtInit

from regency.actor import (
    ActorError,
    BootstrapCommand,
    SupervisionError,
    default_bootstrap_cmd,
    this_host,
)

T = 30


@pytest.fixture(scope="module")
def procs() -> Iterator[Any]:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="parity")
    yield procs
    procs.stop().get(timeout=T)


def fresh(per_host: dict[str, int] | None = None) -> Any:
    return this_host().spawn_procs(per_host=per_host or {"gpus": 2})


def until(fn: Callable[[], Any], what: str, timeout: float = T) -> Any:
    """Poll ``fn`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout}s")
        time.sleep(0.05)


# -- context ------------------------------------------------------------------------------------
def test_current_rank_in_init_is_the_actors_own(procs: Any) -> None:
    seen = procs.spawn("rank_at_init", RankAtInit).seen.call().get(timeout=T)
    for point, (at_init, in_endpoint, (name, text)) in seen.items():
        assert at_init == in_endpoint == point.rank
        assert name == "rank_at_init"  # the instance name is the spawn name, as in Monarch
        assert text == f"<root>.<_parity_actors.RankAtInit rank_at_init{point!r}>"
        assert f"{point.rank}/2" in text  # Monarch's point form: {'gpus': 1/2}


# -- error texts --------------------------------------------------------------------------------
def test_an_endpoint_error_says_actor_call_failed(procs: Any) -> None:
    w = procs.spawn("calls", Faulty)
    with pytest.raises(ActorError, match=r"Actor call calls\.boom failed\.") as info:
        w.boom.call().get(timeout=T)
    assert "Traceback of where the remote call failed" in str(info.value)
    assert "ValueError: boom here" in str(info.value)


def test_a_failed_init_says_all_its_descendants_have_failed(unhandled_failures: Any) -> None:
    procs = fresh()
    try:
        w = procs.spawn("badinit", Faulty, True)
        with pytest.raises(SupervisionError, match=r"Endpoint call badinit\.ok\(\) failed"
                                                   r".*The actor .* and all its descendants "
                                                   r"have failed"
                                                   r".*ValueError: bad init"):
            w.ok.call().get(timeout=T)
        failure = unhandled_failures.wait_for("bad init")[0]
        assert "Supervision event: actor <_parity_actors.Faulty badinit{" in str(failure)
        assert failure.report().startswith("The actor <_parity_actors.Faulty badinit{")
        assert "and all its descendants have failed:\n  ValueError: bad init" in failure.report()
    finally:
        procs.stop().get(timeout=T)


def test_a_killed_proc_says_killed_sig_9(unhandled_failures: Any) -> None:
    from regency.testing import kill_rank

    procs = fresh()
    try:
        w = procs.spawn("killed", Faulty)
        w.ok.call().get(timeout=T)
        kill_rank(w, 1)
        unhandled_failures.wait_for("Killed(sig=9)")
        with pytest.raises(SupervisionError, match=r"The actor .* and all its descendants have "
                                                   r"failed: the "
                                                   r"process this actor was running on failed: "
                                                   r"Killed\(sig=9\)"):
            w.ok.call().get(timeout=T)
    finally:
        procs.stop().get(timeout=T)


def test_an_exit_code_says_exited_with_non_zero_code(unhandled_failures: Any) -> None:
    procs = fresh()
    try:
        w = procs.spawn("exits", Faulty)
        with pytest.raises(SupervisionError, match=r"Endpoint call exits\.exit3\(\) failed.*the "
                                                   r"process this actor was running on exited "
                                                   r"with non-zero code 3"):
            w.slice(gpus=1).exit3.call().get(timeout=T)
        failure = unhandled_failures.wait_for("non-zero code 3")[0]
        assert "exited with code 3" in failure.report()  # our words follow
    finally:
        procs.stop().get(timeout=T)


def test_spawning_on_a_stopped_proc_mesh_says_already_stopped() -> None:
    procs = fresh()
    w = procs.spawn("before_stop", Faulty)
    w.ok.call().get(timeout=T)
    procs.stop().get(timeout=T)
    with pytest.raises(RuntimeError, match=r"`ProcMesh` has already been stopped"):
        procs.spawn("after_stop", Faulty)
    with pytest.raises(SupervisionError, match=r"Endpoint call before_stop\.ok\(\) failed.*"
                                               r"stopped by client"):
        w.ok.call().get(timeout=T)


# -- Instance.abort -----------------------------------------------------------------------------
def test_abort_answers_the_call_in_hand_then_fails_the_actor(unhandled_failures: Any) -> None:
    procs = fresh({"gpus": 1})
    try:
        w = procs.spawn("aborts", Faulty)
        assert w.abort.call_one("my reason").get(timeout=T) == "answered first"
        failure = unhandled_failures.wait_for("actor explicitly aborted due to: my reason")[0]
        assert failure.mesh_name.startswith("aborts-")
        with pytest.raises(SupervisionError, match="actor explicitly aborted due to: my reason"):
            w.ok.call_one().get(timeout=T)
    finally:
        procs.stop().get(timeout=T)


# -- __supervise__ ------------------------------------------------------------------------------
@pytest.mark.parametrize("how,words", [
    ("broadcast", "ValueError: boom here"),
    ("not-awaited", "exited with non-zero code 3"),
    ("kill", "Killed(sig=9)"),
    ("abort", "actor explicitly aborted due to: aborted on purpose"),
])
def test_the_owner_hears_of_every_failure_and_slices_inherit_it(how: str, words: str) -> None:
    procs = fresh({"m": 1})
    try:
        owner = procs.spawn("owner", Owner)
        assert owner.start.call_one().get(timeout=T) == "started"
        owner.provoke.call_one(how).get(timeout=T)
        events = until(lambda: [e for e in owner.events.call_one().get(timeout=T)
                                if words in e], f"supervision event with {words!r}")
        assert "Supervision event: actor <_parity_actors.Faulty workers{" in events[0]
        # the whole mesh (a slice containing the failed rank) keeps failing, with the words
        text = owner.call_whole.call_one().get(timeout=T)
        assert text.startswith("SupervisionError: Endpoint call workers.ok() failed")
        assert "and all its descendants have failed" in text and words in text
    finally:
        procs.stop().get(timeout=T)


def test_a_raising_sync_supervisor_is_named(unhandled_failures: Any) -> None:
    procs = fresh({"m": 1})
    try:
        owner = procs.spawn("owner", Owner, "raise")
        owner.start.call_one().get(timeout=T)
        owner.provoke.call_one("broadcast").get(timeout=T)
        failure = unhandled_failures.wait_for("the supervisor's own error")[-1]
        report = failure.report()
        assert "KeyError: \"the supervisor's own error\"" in report
        assert "This error occurred while handling another failure:" in report
        assert "ValueError: boom here" in report  # the original, in the chain
    finally:
        procs.stop().get(timeout=T)


def test_a_raising_async_supervisor_is_named(unhandled_failures: Any) -> None:
    procs = fresh({"m": 1})
    try:
        owner = procs.spawn("aowner", AsyncOwner)
        owner.start.call_one().get(timeout=T)
        owner.provoke.call_one().get(timeout=T)
        failure = unhandled_failures.wait_for("the async supervisor's own error")[-1]
        assert "KeyError" in failure.report() and "ValueError: boom here" in failure.report()
        with pytest.raises(SupervisionError, match=r"Endpoint call aowner\.ok\(\) failed.*"
                                                   r"and all its descendants have failed"):
            owner.ok.call_one().get(timeout=T)
    finally:
        procs.stop().get(timeout=T)


# -- bootstrap commands -------------------------------------------------------------------------
def test_default_bootstrap_cmd_is_this_python() -> None:
    cmd = default_bootstrap_cmd()
    assert isinstance(cmd, BootstrapCommand)
    assert (cmd.program, cmd.arg0, cmd.env, cmd.inherit_env) == (sys.executable, None, {}, True)
    assert cmd.args == ["-m", "regency._api._bootstrap_main"]
    assert cmd.with_env({"A": "1", "B": None}).env == {"A": "1", "B": None}
    assert cmd.env == {}  # with_env copies
    assert cmd.with_env({"B": None}).environment({"B": "x", "C": "y"}) == {"C": "y"}
    assert BootstrapCommand("p", env={"A": "1"}, inherit_env=False).environment({"C": "y"}) == {
        "A": "1"}


def test_spawn_procs_with_bootstrap_commands() -> None:
    cmd = default_bootstrap_cmd().with_env({"PARITY_X": "all"})
    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap_command=cmd)
    try:
        got = procs.spawn("boot", Faulty).info.call().get(timeout=T)
        assert sorted(got.values()) == [(sys.executable, "all", 0), (sys.executable, "all", 1)]
    finally:
        procs.stop().get(timeout=T)
    per_rank = this_host().spawn_procs(
        per_host={"gpus": 2},
        bootstrap_command=lambda p: default_bootstrap_cmd().with_env({"PARITY_X": f"r{p.rank}"}))
    try:
        got = per_rank.spawn("boot", Faulty).info.call().get(timeout=T)
        assert sorted(v[1] for v in got.values()) == ["r0", "r1"]
    finally:
        per_rank.stop().get(timeout=T)


def test_with_python_executable() -> None:
    host = this_host().with_python_executable(sys.executable)
    procs = host.spawn_procs(per_host={"gpus": 1})
    try:
        assert procs.spawn("py", Faulty).info.call_one().get(timeout=T)[0] == sys.executable
    finally:
        procs.stop().get(timeout=T)
    with pytest.raises(TypeError, match="with_python_executable needs the path"):
        this_host().with_python_executable("")


def test_a_bootstrap_command_that_cannot_run_fails_the_spawn(unhandled_failures: Any) -> None:
    host = this_host().with_python_executable("/nonexistent/python")
    procs = host.spawn_procs(per_host={"gpus": 1})
    try:
        w = procs.spawn("nopy", Faulty)
        with pytest.raises(SupervisionError, match="exited with non-zero code 1"):
            w.ok.call_one().get(timeout=T)
        failures = unhandled_failures.wait_for("/nonexistent/python")
        assert any("No such file or directory" in f.report() for f in failures)
    finally:
        procs.stop().get(timeout=T)


def test_a_sync_actor_with_an_async_hook_is_refused_in_monarchs_words(procs: Any) -> None:
    from _parity_actors import AsyncHookOnSyncActor

    with pytest.raises(ValueError, match=r"has sync endpoints, but an async __supervise__\. "
                                         r"Make sure __supervise__ is also synchronous"):
        procs.spawn("mixed_hooks", AsyncHookOnSyncActor)


def test_slices_taken_before_or_after_a_failure_inherit_it(unhandled_failures: Any) -> None:
    procs = fresh()
    try:
        w = procs.spawn("sliced", Faulty)
        before = w.slice(gpus=1)
        w.ok.call().get(timeout=T)
        before.boom.broadcast()  # no reply port: the actor fails
        unhandled_failures.wait_for("boom here")
        for one in (before, w.slice(gpus=1), w):
            with pytest.raises(SupervisionError, match="and all its descendants have failed"):
                one.ok.call().get(timeout=T)
        assert list(w.slice(gpus=0).ok.call().get(timeout=T).values()) == [1]
    finally:
        procs.stop().get(timeout=T)


def test_hooks_may_call_the_base_class_as_in_monarch(unhandled_failures: Any) -> None:
    """``Actor.__supervise__`` and ``Actor.__cleanup__`` exist and do nothing: a hook that
    ends with ``super()`` leaves the failure unhandled, and goes up to the client."""
    procs = fresh({"gpus": 1})
    try:
        owner = procs.spawn("superowner", Owner, "super")
        assert owner.start.call_one().get(timeout=T) == "started"
        owner.provoke.call_one("kill").get(timeout=T)
        failure = unhandled_failures.wait_for("superowner")[0]
        assert "did not handle the failure" in str(failure), failure
        assert "AttributeError" not in failure.report()
    finally:
        procs.stop().get(timeout=T)


def test_this_proc_cannot_be_stopped_by_the_code_it_runs(procs: Any) -> None:
    from regency.actor import this_proc

    with pytest.raises(ValueError, match="ProcMesh is not owned; must be stopped by an owner"):
        this_proc().stop()
    here = this_proc().spawn("still_here", Faulty)  # this proc goes on as before
    assert here.ok.call_one().get(timeout=T) == 1


def test_this_proc_is_the_same_object_each_time() -> None:
    from regency.actor import this_proc

    assert this_proc() is this_proc()  # as Monarch's (a new ProcMesh each call before)


def test_spawn_refuses_a_name_that_is_not_a_str_and_an_instance(procs: Any) -> None:
    with pytest.raises(TypeError, match="must be a str, not int"):
        procs.spawn(5, Faulty)
    with pytest.raises(TypeError, match="must subclass"):  # Monarch: TypeError
        procs.spawn("inst", Faulty())
    with pytest.raises(ValueError, match="must subclass"):  # Monarch: ValueError
        procs.spawn("notactor", dict)
