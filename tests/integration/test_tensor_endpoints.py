"""Remote tensors meet actors (issue 13, items 3 and 6; ADR 0025), and borrows between streams.

* a remote tensor passed to an endpoint reaches each rank's actor as that rank's local
  tensor, after every op issued before the call; a failed one fails the call with the op's
  ``RemoteException``;
* ``endpoint.rref()`` keeps the endpoint's value remote, in the op stream;
* ``Stream.borrow(t, mutable=...)`` and ``drop()`` follow the reference's rules, and breaking
  one is a ``TypeError`` at the call.

Real procs, real workers, real actors; every wait is bounded. Skips without torch.
"""

from __future__ import annotations

import gc
import pickle
import warnings

import pytest

torch = pytest.importorskip("torch")

from regency import RemoteException, Stream, Tensor, fetch_shard, no_mesh, remote  # noqa: E402
from regency.actor import Actor, as_endpoint, endpoint, this_host  # noqa: E402

T = 60


class Keeper(Actor):
    """Receives local tensors; remembers what it saw, in order."""

    def __init__(self) -> None:
        self.seen: list[object] = []
        self.total = torch.zeros(3)

    @endpoint
    def see(self, t: torch.Tensor) -> list[float]:
        self.seen.append(("tensor", t.tolist()))
        return t.tolist()

    @endpoint
    def note(self, tag: str) -> None:
        self.seen.append(("plain", tag))

    @endpoint
    def log(self) -> list[object]:
        return list(self.seen)

    @endpoint
    def nested(self, pair: dict, scale: float, *, extra: torch.Tensor) -> float:
        return float((pair["a"] + pair["b"][0]).sum() * scale + extra.sum())

    @endpoint(propagate=lambda t: t * 2)
    def double(self, t: torch.Tensor) -> torch.Tensor:
        return t * 2

    @endpoint(propagate=lambda t: (t.sum(), t))
    def halves(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return t.sum(), t + 100

    @endpoint(propagate="inspect")
    def accumulate(self, t: torch.Tensor) -> None:
        self.total += t

    @endpoint
    def totals(self) -> list[float]:
        return self.total.tolist()

    @endpoint(propagate=lambda t: t)
    def broken(self, t: torch.Tensor) -> torch.Tensor:
        raise ValueError("the endpoint broke")

    @endpoint
    def learnt(self, t: torch.Tensor) -> tuple[torch.Tensor, str, torch.Tensor]:
        self.seen.append(("learnt", t.tolist()))
        return t + 1, "tag", t.sum()

    @endpoint
    def unlearnable(self, t: torch.Tensor) -> torch.Tensor:
        raise KeyError("no shapes to learn")

    @endpoint(propagate=lambda t: t)
    def fatal(self, t: torch.Tensor) -> torch.Tensor:
        raise SystemExit("the actor ends here")  # not an Exception: it fails the actor

    def scaled(self, t: torch.Tensor, k: float) -> torch.Tensor:
        return t * k


class AsyncKeeper(Actor):
    @endpoint
    async def see(self, t: torch.Tensor) -> list[float]:
        return t.tolist()


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="tep")
    with procs.activate():
        warm = torch.zeros(1)
    fetch_shard(warm).get(timeout=T)
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(scope="module")
def keeper(procs):
    return procs.spawn("keeper", Keeper)


def fetch(t, **coords):
    return fetch_shard(t, **coords).get(timeout=T)


def by_rank(mesh):
    return [v for _, v in sorted(mesh.items(), key=lambda kv: kv[0]["gpus"])]


# -- remote tensors as endpoint arguments -------------------------------------------------------
def test_endpoint_gets_each_rank_s_tensor_after_the_ops_before_it(procs, keeper) -> None:
    with procs.activate():
        x = torch.ones(3) + procs.rank_tensor("gpus")
        y = x * 2
        y.add_(1)  # in place, just before the call: the actor must see it
        seen = keeper.see.call(y)
    assert by_rank(seen.get(timeout=T)) == [[3.0] * 3, [5.0] * 3]


def test_tensor_calls_and_plain_calls_keep_the_actor_s_order(procs) -> None:
    k = procs.spawn("order", Keeper)
    with procs.activate():
        t = torch.zeros(1)
        for i in range(4):
            k.note.broadcast(f"p{i}")
            t = t + 1
            k.see.broadcast(t)
    log = by_rank(k.log.call().get(timeout=T))
    expected = []
    for i in range(4):
        expected += [("plain", f"p{i}"), ("tensor", [float(i + 1)])]
    assert log == [expected, expected]


def test_nested_arguments_keywords_and_one_member(procs, keeper) -> None:
    with procs.activate():
        a = torch.ones(2)
        b = torch.full((2,), 2.0) + procs.rank_tensor("gpus")
        extra = torch.full((3,), 10.0)
        total = keeper.nested.call({"a": a, "b": [b]}, 0.5, extra=extra)
        one = keeper.slice(gpus=1).see.call_one(b)
        chosen = keeper.see.choose(a)
    assert by_rank(total.get(timeout=T)) == [33.0, 34.0]
    assert one.get(timeout=T) == [3.0, 3.0]
    assert chosen.get(timeout=T) == [1.0, 1.0]


def test_a_stream_of_tensor_calls_is_a_value_stream(procs, keeper) -> None:
    with procs.activate():
        t = torch.ones(2) + procs.rank_tensor("gpus")
        stream = keeper.see.stream(t)
    assert type(stream).__name__ == "ValueStream"
    assert stream.cancel() is False  # not cancellable: the arguments would stay in brokers
    assert sorted(f.get(timeout=T) for f in stream) == [[1.0, 1.0], [2.0, 2.0]]


def test_async_actor_gets_tensors_without_blocking_its_loop(procs) -> None:
    k = procs.spawn("async_keeper", AsyncKeeper)
    with procs.activate():
        t = torch.arange(3.0) * procs.rank_tensor("gpus")
        seen = [k.see.call(t + i) for i in range(3)]
    for i, s in enumerate(seen):
        assert by_rank(s.get(timeout=T)) == [[float(i)] * 3, [i + 0.0, i + 1.0, i + 2.0]]


def test_a_failed_argument_fails_the_call_with_the_op_s_remote_exception(procs, keeper) -> None:
    def fail(t):
        raise ValueError("made to fail")

    broken = remote(fail, propagate=lambda t: t)
    with procs.activate():
        bad = broken(torch.ones(2))  # the op that fails
        call = keeper.see.call(bad + 1)
        fine = keeper.see.call(torch.ones(1))
    with pytest.raises(RemoteException, match="made to fail") as info:
        call.get(timeout=T)
    assert "bad = broken(torch.ones(2))" in info.value.controller_frames
    assert by_rank(fine.get(timeout=T)) == [[1.0], [1.0]]  # the actor lives on
    assert by_rank(keeper.totals.call().get(timeout=T))  # and answers plain calls


def test_a_broadcast_with_a_failed_argument_skips_the_endpoint_not_the_actor(procs) -> None:
    def fail(t):
        raise ValueError("made to fail")

    k = procs.spawn("skipper", Keeper)
    broken = remote(fail, propagate=lambda t: t)
    with procs.activate():
        k.see.broadcast(broken(torch.ones(1)))
        k.see.broadcast(torch.zeros(1))
    assert by_rank(k.log.call().get(timeout=T)) == [[("tensor", [0.0])]] * 2


def test_bad_tensor_arguments_are_refused_at_the_call(procs, keeper) -> None:
    side = Stream("side_args")
    with procs.activate():
        t = torch.ones(2)
        gone = torch.ones(2)
        gone.drop()
        with pytest.raises(TypeError, match="remote tensor 0 of the arguments: DROPPED"):
            keeper.see.call(gone)
        with side.activate():
            other = torch.ones(2)
        with pytest.raises(TypeError, match=r"remote tensor 1 .*WRONG_STREAM"):
            keeper.nested.call({"a": t, "b": [other]}, 1.0, extra=t)
    assert by_rank(keeper.see.call(t).get(timeout=T)) == [[1.0, 1.0]] * 2  # its own mesh


def test_a_remote_tensor_cannot_travel_outside_a_call(procs) -> None:
    with procs.activate():
        t = torch.ones(2)
    with pytest.raises(TypeError, match=r"cannot be pickled.*fetch_shard"):
        pickle.dumps(t)  # a remote tensor has no data here


def test_actors_on_other_procs_cannot_take_the_tensors(procs) -> None:
    others = this_host().spawn_procs(per_host={"gpus": 2}, name="tep_other")
    try:
        stranger = others.spawn("stranger", Keeper)
        with procs.activate():
            t = torch.ones(2)
            with pytest.raises(ValueError, match="procs outside that mesh"):
                stranger.see.call(t)
    finally:
        others.stop().get(timeout=T)


# -- endpoint.rref() ---------------------------------------------------------------------------
def test_rref_keeps_the_value_remote_in_the_stream(procs, keeper) -> None:
    with procs.activate():
        x = torch.ones(3) + procs.rank_tensor("gpus")
        y = keeper.double.rref(x)
        assert isinstance(y, Tensor) and y.shape == (3,)
        s, t = keeper.halves.rref(y)
        z = t - 100 + s
        k = as_endpoint(keeper.scaled, propagate=lambda t, k: t).rref(x, 3.0)
    assert fetch(y, gpus=1).tolist() == [4.0] * 3
    assert fetch(z, gpus=0).tolist() == [8.0] * 3
    assert fetch(k, gpus=1).tolist() == [6.0] * 3


def test_rref_with_inspect_runs_in_order_and_keeps_nothing(procs) -> None:
    k = procs.spawn("acc", Keeper)
    with procs.activate():
        t = torch.ones(3)
        for _ in range(3):
            assert k.accumulate.rref(t) is None
            t = t * 2
    assert by_rank(k.totals.call().get(timeout=T)) == [[7.0] * 3, [7.0] * 3]


def test_rref_failure_reaches_the_results_not_the_actor(procs, keeper) -> None:
    with procs.activate():
        out = keeper.broken.rref(torch.ones(2))
        after = out + 1
        ok = keeper.double.rref(torch.ones(1))
    with pytest.raises(RemoteException, match="the endpoint broke"):
        fetch(after)
    assert fetch(ok).tolist() == [2.0]


def test_rref_whose_actor_fails_fails_its_results_instead_of_hanging(
        procs, unhandled_failures) -> None:
    doomed = procs.spawn("doomed", Keeper)
    with procs.activate():
        out = doomed.fatal.rref(torch.ones(1))
        after = out * 2
    with pytest.raises(RemoteException, match="its actor failed"):
        fetch(after)
    unhandled_failures.wait_for("the actor ends here")


def test_rref_without_propagate_learns_the_shapes_once_without_running_twice(procs) -> None:
    k = procs.spawn("learner", Keeper)
    with procs.activate():
        x = torch.ones(2) * procs.rank_tensor("gpus")
        first, tag, total = k.learnt.rref(x)  # waits for rank 0's shapes, once
        assert tag == "tag" and first.shape == (2,) and total.shape == ()
        again, _, _ = k.learnt.rref(x * 3)  # same input shapes: from the cache
        out = again + total
        with pytest.raises(RemoteException, match="no shapes to learn"):
            k.unlearnable.rref(x)  # nothing to learn from: raised at the call
    assert fetch(first, gpus=1).tolist() == [2.0, 2.0]
    assert fetch(out, gpus=1).tolist() == [6.0, 6.0]
    log = by_rank(k.log.call().get(timeout=T))
    assert log[1] == [("learnt", [1.0, 1.0]), ("learnt", [3.0, 3.0])]  # ran once per call


def test_rref_needs_an_active_mesh(procs, keeper) -> None:
    with procs.activate(), no_mesh.activate(), pytest.raises(TypeError, match="active device"):
        keeper.double.rref(1)
    with pytest.raises(TypeError, match="active device mesh"):
        keeper.double.rref(1)


# -- borrows -----------------------------------------------------------------------------------
def test_immutable_borrow_reads_on_both_streams_and_writes_on_neither(procs) -> None:
    side = Stream("side_r")
    with procs.activate():
        t = torch.ones(2)
        view = t[:1]
        tb, borrow = side.borrow(t)
        on_main = t + 1  # reading is fine
        with side.activate():
            on_side = tb * 3
            with pytest.raises(TypeError, match=r"argument 'self' .*MUTATING_BORROW"):
                tb.add_(1)
        with pytest.raises(TypeError, match=r"MUTATING_BORROW(.|\n)*borrowed at"):
            view.mul_(2)  # a view of the lent tensor: read-only too
        with pytest.raises(TypeError, match="MUTATING_BORROW"):
            side.borrow(t, mutable=True)
        borrow.drop()
        t.add_(1)  # its rights are back
        with side.activate(), pytest.raises(TypeError, match=r"DROPPED(.|\n)*borrow.drop"):
            tb + 1
    assert fetch(on_main).tolist() == [2.0, 2.0]
    assert fetch(on_side).tolist() == [3.0, 3.0]
    assert fetch(t).tolist() == [2.0, 2.0]


def test_mutable_borrow_excludes_its_lender_until_dropped(procs) -> None:
    side = Stream("side_w")
    with procs.activate():
        t = torch.zeros(2)
        view = t.view(2)
        tb, borrow = side.borrow(t, mutable=True)
        with borrow:
            with pytest.raises(TypeError, match=r"argument 'self' .*BORROWED"):
                t + 1
            with pytest.raises(TypeError, match="BORROWED"):
                view.sum()
            with pytest.raises(TypeError, match="BORROWED"):
                side.borrow(t)  # no second borrow while a mutable one is out
            with pytest.raises(TypeError, match="tensor 0: BORROWED"):
                fetch_shard(t)
            with side.activate():
                tb.add_(5)
        after = t + 1
    assert fetch(after).tolist() == [6.0, 6.0]


def test_an_error_on_the_borrowing_stream_reaches_the_lender(procs) -> None:
    def fail(t):
        raise RuntimeError("side stream failed")

    broken = remote(fail, propagate=lambda t: t)
    side = Stream("side_e")
    with procs.activate():
        t = torch.ones(2)
        independent = t * 1
        tb, borrow = side.borrow(t, mutable=True)
        with side.activate():
            tb.add_(broken(tb))  # tb now holds the error
        borrow.drop()
        after = t + 1
    with pytest.raises(RemoteException, match="side stream failed"):
        fetch(after)
    assert fetch(independent).tolist() == [1.0, 1.0]


def test_a_forgotten_borrow_warns_and_drops_itself(procs) -> None:
    side = Stream("side_gc")
    with procs.activate():
        t = torch.ones(2)
        tb, borrow = side.borrow(t, mutable=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del borrow
            gc.collect()
        assert any("garbage-collected before borrow.drop()" in str(w.message) for w in caught)
        assert tb.dropped
        after = t + 1  # usable again
    assert fetch(after).tolist() == [2.0, 2.0]
