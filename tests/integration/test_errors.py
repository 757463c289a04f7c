"""Errors at the caller: ActorError with the remote traceback (actor survives), and the
mistakes that must be caught eagerly at the call or spawn site."""

from __future__ import annotations

import threading

import pytest

from _actors import (
    AsyncCounter,
    Colliding,
    CollidingStop,
    Counter,
    Mixed,
    Unpicklable,
)
from regency.actor import ActorError, concurrent_endpoint, endpoint, this_host

T = 20


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="errors")
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(scope="module", params=["sync", "async"])
def counters(request, procs):
    cls = Counter if request.param == "sync" else AsyncCounter
    return procs.spawn(f"err_{request.param}", cls, 0)


def test_endpoint_exception_becomes_actor_error_and_actor_survives(counters) -> None:
    with pytest.raises(ActorError) as info:
        counters.fail.call("bad x").get(timeout=T)
    err = info.value
    assert isinstance(err.exception, ValueError)
    assert str(err.exception) == "bad x"
    text = str(err)
    assert "fail" in err.message
    assert "Traceback of where the remote call failed" in text
    assert "_actors.py" in text  # the remote frame of the user's code
    assert "raise ValueError(msg)" in text
    assert "ValueError: bad x" in text
    # the actors live on
    before = list(counters.value.call().get(timeout=T).values())
    after = list(counters.incr.call(1).get(timeout=T).values())
    assert after == [b + 1 for b in before]


def test_actor_error_on_call_one_and_stream(counters) -> None:
    with pytest.raises(ActorError, match="only one"):
        counters.slice(gpus=1).fail.call_one("only one").get(timeout=T)
    futures = list(counters.fail.stream("streamed"))
    assert len(futures) == 2
    for f in futures:
        with pytest.raises(ActorError, match="streamed"):
            f.get(timeout=T)


def test_chained_exception_text_is_kept(procs) -> None:
    mesh = procs.spawn("chained", Counter).slice(gpus=0)
    with pytest.raises(ActorError) as info:
        mesh.fail_chained.call_one("outer").get(timeout=T)
    text = str(info.value)
    assert "inner cause" in text and "outer" in text


def test_wrong_arguments_raise_type_error_at_the_call_site(counters) -> None:
    with pytest.raises(TypeError, match="incr"):
        counters.incr.call(1, 2, 3)
    with pytest.raises(TypeError, match="incr"):
        counters.incr.call(nope=1)
    with pytest.raises(TypeError, match="echo"):
        counters.echo.call()
    with pytest.raises(TypeError, match="incr"):
        counters.slice(gpus=0).incr.call_one(1, 2)
    with pytest.raises(TypeError, match="incr"):
        counters.incr.broadcast(1, 2)
    with pytest.raises(TypeError, match="incr"):
        counters.incr.choose(1, 2)
    with pytest.raises(TypeError, match="incr"):
        list(counters.incr.stream(1, 2))
    # nothing was sent by the failed calls
    assert len(counters.value.call().get(timeout=T)) == 2


def test_keyword_only_arguments_are_checked(procs) -> None:
    mesh = procs.spawn("kwonly", Counter).slice(gpus=0)
    with pytest.raises(TypeError, match="kw_only"):
        mesh.kw_only.call_one(1, 2)
    with pytest.raises(TypeError, match="kw_only"):
        mesh.kw_only.call_one(1)
    assert mesh.kw_only.call_one(1, b=2).get(timeout=T) == 12


def test_calling_a_non_endpoint_method(procs) -> None:
    mesh = procs.spawn("non_endpoint", Counter)
    with pytest.raises(RuntimeError, match="@endpoint"):
        mesh.helper.call()
    with pytest.raises(RuntimeError, match="@endpoint"):
        mesh.slice(gpus=0).helper.call_one()


def test_a_fault_handling_a_reply_fails_the_call_instead_of_leaving_it_pending(
        counters, monkeypatch) -> None:
    from regency._api import _endpoint

    def broken(self, rank, value) -> None:
        raise TypeError("a fault of regency's own")

    if not _endpoint.__file__.endswith(".py"):  # compiled code calls its own method
        pytest.skip("the compiled collector cannot be patched (the pure-Python pass runs it)")
    monkeypatch.setattr(_endpoint._One, "value", broken)
    with pytest.raises(RuntimeError, match="could not handle the reply: TypeError: a fault"):
        counters.slice(gpus=0).echo.call_one(1).get(timeout=T)


def test_call_one_on_a_mesh_of_several_raises_at_call_time(counters) -> None:
    with pytest.raises(ValueError, match="exactly 1"):
        counters.value.call_one()  # no .get(): raised eagerly


def test_unpicklable_argument_names_the_argument(counters) -> None:
    lock = threading.Lock()
    with pytest.raises(TypeError) as info:
        counters.echo.call(lock)
    assert "argument 0" in str(info.value) or "positional" in str(info.value)
    assert "lock" in str(info.value).lower()
    with pytest.raises(TypeError) as info:
        counters.echo.call(x=lock)
    assert "'x'" in str(info.value) or "x" in str(info.value)
    # the mesh is fine afterwards
    assert list(counters.echo.call(1).get(timeout=T).values()) == [1, 1]


def test_lambdas_and_closures_are_fine_as_arguments(counters) -> None:
    k = 3
    fn = lambda v: v * k  # noqa: E731
    got = counters.slice(gpus=0).echo.call_one(fn).get(timeout=T)
    assert got(2) == 6


def test_unpicklable_return_value_is_an_actor_error(procs) -> None:
    mesh = procs.spawn("unpicklable", Unpicklable).slice(gpus=0)
    with pytest.raises(ActorError) as info:
        mesh.lock.call_one().get(timeout=T)
    # Monarch's: the error's ``exception`` is the pickling error itself (a TypeError here)
    assert type(info.value.exception) is TypeError
    assert "the result of lock could not be pickled" in str(info.value.exception)
    assert "lock" in str(info.value)
    last = str(info.value).rstrip().splitlines()[-1]  # what a reader sees last says it too
    assert last.startswith("TypeError: the result of lock could not be pickled"), last
    assert mesh.ok.call_one().get(timeout=T) == 1  # the actor survived


def test_endpoint_name_colliding_with_mesh_attribute(procs) -> None:
    with pytest.raises(ValueError, match="collides"):
        procs.spawn("colliding", Colliding)
    with pytest.raises(ValueError, match="collides"):
        procs.spawn("colliding_stop", CollidingStop)


def test_mixing_sync_and_async_endpoints_is_rejected_at_spawn(procs) -> None:
    with pytest.raises(ValueError, match="mixes"):
        procs.spawn("mixed", Mixed)


def test_concurrent_endpoint_on_sync_method_is_rejected() -> None:
    with pytest.raises(ValueError):

        @concurrent_endpoint
        def f(self):
            return 1


def test_endpoint_decorator_forms() -> None:
    # bare and with options; the decorated class is a plain class until spawned
    class A:
        @endpoint
        def a(self) -> int:
            return 1

        @endpoint(explicit_response_port=True)
        def b(self, port) -> None:
            port.send(1)

    assert A is not None


def test_exception_in_broadcast_fails_the_actor(procs, unhandled_failures) -> None:
    """No reply port: the actor fails, the owner (the root) hears of it, and later calls to
    that actor raise SupervisionError; the other actor of the mesh is fine."""
    from regency.actor import MeshFailure, SupervisionError

    mesh = procs.spawn("bcast_fail", Counter, 0)
    mesh.slice(gpus=1).fail.broadcast("fatal broadcast")
    with pytest.raises(SupervisionError):
        mesh.slice(gpus=1).value.call_one().get(timeout=T)
    assert mesh.slice(gpus=0).value.call_one().get(timeout=T) == 0
    # the root hears of it by another path than the failed call: wait for it, not assume it
    failures = unhandled_failures.wait_for("fatal broadcast")
    assert len(failures) == 1
    f = failures[0]
    assert isinstance(f, MeshFailure)
    assert "bcast_fail" in f.mesh_name
    assert "fatal broadcast" in f.report()
    with pytest.raises(SupervisionError):
        mesh.value.call().get(timeout=T)  # the full mesh includes the failed rank


def test_init_failure_makes_calls_fail_and_is_reported(procs, unhandled_failures) -> None:
    from _actors import BadInit
    from regency.actor import SupervisionError

    mesh = procs.spawn("bad_init", BadInit, 1)
    assert mesh.slice(gpus=0).ok.call_one().get(timeout=T) == "ok"
    with pytest.raises(SupervisionError, match=r"init failed on purpose|__init__"):
        mesh.slice(gpus=1).ok.call_one().get(timeout=T)
    failures = unhandled_failures.wait_for("init failed on purpose")  # may come after the call
    assert len(failures) == 1


def test_pending_call_fails_promptly_when_the_proc_dies(unhandled_failures) -> None:
    """No silent hangs: a call waiting on an actor whose process is killed fails with
    SupervisionError, and the failure reaches the owner (here the root)."""
    import os
    import signal

    from _actors import Concurrent
    from regency.actor import SupervisionError

    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="doomed")
    try:
        mesh = procs.spawn("doomed_actor", Concurrent)
        pids = list(procs.spawn("doomed_pids", Counter).pid.call().get(timeout=T).values())
        pending = mesh.slice(gpus=1).wait_for_release.call_one("never")
        os.kill(pids[1], signal.SIGKILL)
        with pytest.raises(SupervisionError):
            pending.get(timeout=T)
        # calls to the dead rank fail at once; the live rank still works
        with pytest.raises(SupervisionError):
            mesh.slice(gpus=1).release.call_one().get(timeout=T)
        assert mesh.slice(gpus=0).release.call_one().get(timeout=T) == "ok"
    finally:
        procs.stop().get(timeout=T)
    unhandled_failures.wait_for("killed by signal SIGKILL")  # the root was told the proc died


def test_unpicklable_spawn_argument_raises_type_error_at_spawn(procs) -> None:
    from _actors import NeedsArgs

    with pytest.raises(TypeError):
        procs.spawn("lock_arg", NeedsArgs, threading.Lock())
    assert list(procs.spawn("after_lock_arg", NeedsArgs, 1).get.call().get(timeout=T).values()
                ) == [(1, "x"), (1, "x")]


def test_actor_class_that_procs_cannot_import_fails_promptly(procs, tmp_path,
                                                             unhandled_failures) -> None:
    """A class from a module the procs cannot import (here: created after the procs started,
    a notebook classic) must not fail silently: the call fails well before any 30 s hold,
    and the error says what went wrong."""
    import sys
    import uuid

    from regency.actor import SupervisionError

    procs.initialized.get(timeout=T)
    modname = f"late_module_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{modname}.py").write_text(
        "from regency.actor import Actor, endpoint\n"
        "class Late(Actor):\n"
        "    @endpoint\n"
        "    def hi(self):\n"
        "        return 'hi'\n")
    sys.path.insert(0, str(tmp_path))
    try:
        late_cls = __import__(modname).Late
        mesh = procs.spawn("late", late_cls)
        with pytest.raises((SupervisionError, ActorError)) as info:
            mesh.hi.call().get(timeout=5)
        assert modname in str(info.value) or "ModuleNotFoundError" in str(info.value)
        text = str(info.value)  # what to do about it, where it happened
        assert "make the module importable there" in text and "sync_workspace" in text, text
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(modname, None)
