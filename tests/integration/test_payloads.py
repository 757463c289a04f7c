"""Large payloads: bytes and numpy arrays of 1 MiB and 64 MiB round trip unchanged."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from _actors import Payload
from regency.actor import Channel, this_host, this_proc

T = 30
MiB = 1 << 20


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="payloads")
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(scope="module")
def echo(procs):
    return procs.spawn("payload", Payload)


def _pattern(n: int) -> bytes:
    return (bytes(range(256)) * (n // 256 + 1))[:n]


@pytest.mark.parametrize("size", [1 * MiB, 64 * MiB], ids=["1MiB", "64MiB"])
def test_bytes_round_trip(echo, size) -> None:
    data = _pattern(size)
    back = echo.slice(gpus=0).echo.call_one(data).get(timeout=T)
    assert type(back) is bytes
    assert len(back) == size
    assert back == data


@pytest.mark.parametrize("size", [1 * MiB, 64 * MiB], ids=["1MiB", "64MiB"])
def test_numpy_round_trip(echo, size) -> None:
    rng = np.random.default_rng(size)
    arr = rng.integers(0, 2**31, size=size // 4, dtype=np.int32)
    back = echo.slice(gpus=1).echo.call_one(arr).get(timeout=T)
    assert isinstance(back, np.ndarray)
    assert back.dtype == arr.dtype and back.shape == arr.shape
    assert np.array_equal(back, arr)


def test_numpy_structured_and_non_contiguous(echo) -> None:
    base = np.arange(2 * MiB, dtype=np.float64).reshape(1024, -1)
    view = base[:, ::3]  # not contiguous
    back = echo.slice(gpus=0).echo.call_one(view).get(timeout=T)
    assert np.array_equal(back, view)
    rec = np.zeros(100_000, dtype=[("a", "i4"), ("b", "f8")])
    rec["a"] = np.arange(100_000)
    back = echo.slice(gpus=0).echo.call_one(rec).get(timeout=T)
    assert np.array_equal(back, rec)


def test_large_payload_to_all_members_and_nested(echo) -> None:
    arr = np.arange(4 * MiB // 8, dtype=np.int64)
    blob = _pattern(3 * MiB)
    vm = echo.echo.call({"a": arr, "nested": [blob, (blob, 1)]}).get(timeout=T)
    for v in vm.values():
        assert np.array_equal(v["a"], arr)
        assert v["nested"][0] == blob and v["nested"][1] == (blob, 1)


def test_large_reply_from_actor(echo) -> None:
    data = echo.slice(gpus=1).make_bytes.call_one(64 * MiB).get(timeout=T)
    assert len(data) == 64 * MiB
    assert data[:256] == bytes(range(256))
    assert hashlib.sha256(data).hexdigest() == hashlib.sha256(_pattern(64 * MiB)).hexdigest()


def test_mutating_an_argument_after_the_call_does_not_change_what_was_sent(echo) -> None:
    """Messages are sent eagerly: the value is the one at call time, even if the caller
    reuses its buffer right after the call returns (before the bytes left the process)."""
    arr = np.zeros(64 * MiB // 8, dtype=np.int64)
    expected = hashlib.sha256(arr.tobytes()).hexdigest()
    fut = echo.slice(gpus=0).digest.call_one(arr)
    arr[:] = 7  # the caller reuses its buffer at once
    assert fut.get(timeout=T) == expected

    buf = bytearray(_pattern(64 * MiB))
    expected = hashlib.sha256(buf).hexdigest()
    fut = echo.slice(gpus=1).digest.call_one(buf)
    buf[:] = b"\0" * len(buf)
    assert fut.get(timeout=T) == expected


def test_large_values_through_a_port(echo, procs) -> None:
    from _actors import PassAround

    users = procs.spawn("port_payload", PassAround).slice(gpus=0)
    port, recv = Channel.open()
    arr = np.arange(8 * MiB // 8, dtype=np.int64)
    users.to_port.call_one(port, [arr, _pattern(2 * MiB)]).get(timeout=T)
    assert np.array_equal(recv.recv().get(timeout=T), arr)
    assert recv.recv().get(timeout=T) == _pattern(2 * MiB)


def test_large_payload_to_actor_in_the_controller_process() -> None:
    local = this_proc().spawn("local_payload", Payload)
    arr = np.arange(16 * MiB // 8, dtype=np.int64)
    back = local.echo.call_one(arr).get(timeout=T)
    assert np.array_equal(back, arr)
    back[0] = 99
    assert arr[0] == 0  # a copy, as across processes
    local.stop().get(timeout=T)


def test_large_payload_between_procs(echo) -> None:
    arr = np.arange(32 * MiB // 8, dtype=np.int64)
    back = echo.slice(gpus=0).relay.call_one(echo.slice(gpus=1), arr).get(timeout=T)
    assert np.array_equal(back, arr)


def test_concurrent_large_echoes_both_ways(echo) -> None:
    arrays = [np.full(16 * MiB // 8, i, dtype=np.int64) for i in range(4)]
    futures = [echo.slice(gpus=i % 2).echo.call_one(a) for i, a in enumerate(arrays)]
    for a, f in zip(arrays, futures):
        assert np.array_equal(f.get(timeout=T), a)


def test_returned_state_is_not_changed_by_the_next_message(procs) -> None:
    """An actor returns its (large) state, then the next message updates it in place: each
    reply must hold the state as it was when the endpoint returned."""
    from _actors import Weights

    weights = procs.spawn("weights", Weights, 32 * MiB // 8).slice(gpus=0)
    snaps = []
    for _ in range(4):
        snaps.append(weights.snapshot.call_one())
        weights.bump.call_one()  # queued right behind the snapshot
    torn = []
    for k, snap in enumerate(snaps):
        got = snap.get(timeout=T)
        lo, hi = int(got.min()), int(got.max())
        if (lo, hi) != (k, k):
            torn.append((k, lo, hi))
    assert not torn, f"replies saw later updates (k, min, max): {torn}"
