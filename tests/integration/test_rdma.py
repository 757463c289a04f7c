"""RDMABuffer between real procs: correctness per kind, size and transport; handles passed
through endpoints; errors; drop; owner death; async use; batches."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from _rdma_actors import AsyncReader, Holder, digest, make_data, pattern

from regency.actor import this_host
from regency.rdma import (
    BufferDroppedError,
    RDMAAction,
    RDMABuffer,
    RDMAError,
    RDMATcpFallbackWarning,
    describe_transport,
    peer_info,
)

T = 30
MiB = 1 << 20
SOCKETS = ["unix", "tcp"]
ALL = ["vm", "unix", "tcp"]


@pytest.fixture(scope="module")
def procs():
    procs = this_host().spawn_procs(per_host={"procs": 2}, name="rdma")
    yield procs
    procs.stop().get(timeout=T)


@pytest.fixture(scope="module")
def holders(procs):
    return procs.spawn("holder", Holder)


@pytest.fixture(scope="module")
def a(holders):
    return holders.slice(procs=0)


@pytest.fixture(scope="module")
def b(holders):
    return holders.slice(procs=1)


_names = iter(range(10**6))


def make(owner, kind: str, nbytes: int, seed: int = 1) -> tuple[str, RDMABuffer]:
    name = f"b{next(_names)}"
    return name, owner.make.call_one(name, kind, nbytes, seed).get(timeout=T)


# -- correctness ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["numpy", "float32", "bytearray", "memoryview"])
def test_read_into_each_kind(a, kind) -> None:
    n = MiB + 13
    name, buf = make(a, kind, n, seed=3)
    expected = make_data(kind, n, 3)
    assert buf.size() == memoryview(expected).nbytes
    dst = np.zeros(buf.size(), dtype=np.uint8)
    assert buf.read_into(dst).get(timeout=T) is None
    assert digest(dst) == digest(expected)
    a.forget.call_one(name).get(timeout=T)


@pytest.mark.parametrize("transport", ALL)
@pytest.mark.parametrize("size", [1000, 64 * MiB], ids=["1000B", "64MiB"])
def test_read_and_write_each_transport(a, transport, size) -> None:
    name, buf = make(a, "numpy", size, seed=size % 97)
    dst = bytearray(size)
    buf.read_into(dst, transport=transport).get(timeout=T)
    assert digest(dst) == digest(pattern(size, size % 97))
    src = pattern(size, 5)
    buf.write_from(src, transport=transport).get(timeout=T)
    assert a.digest.call_one(name).get(timeout=T) == digest(src)
    a.forget.call_one(name).get(timeout=T)


def test_partial_write_and_larger_destination(a) -> None:
    name, buf = make(a, "numpy", 4096, seed=9)
    head = pattern(100, 10)
    buf.write_from(head).get(timeout=T)
    expected = pattern(4096, 9)
    expected[:100] = head
    assert a.digest.call_one(name).get(timeout=T) == digest(expected)
    dst = np.full(5000, 7, dtype=np.uint8)
    buf.read_into(dst, transport="tcp").get(timeout=T)
    assert digest(dst[:4096]) == digest(expected) and (dst[4096:] == 7).all()
    a.forget.call_one(name).get(timeout=T)


@pytest.mark.parametrize("transport", [*ALL, "local"])
@pytest.mark.parametrize("size", [1000, 3 * MiB], ids=["1000B", "3MiB"])
def test_a_slice_of_a_buffer_moves_only_its_bytes(a, transport, size) -> None:
    if transport == "local":
        data = pattern(size, 41)
        name, buf = None, RDMABuffer(data)
    else:
        name, buf = make(a, "numpy", size, seed=41)
    lo, hi = size // 3, size // 3 + size // 4
    part = buf[lo:hi]
    assert part.size() == hi - lo and f"[{lo}:{hi}]" in repr(part)
    got = np.zeros(hi - lo, dtype=np.uint8)
    part.read_into(got, transport=transport).get(timeout=T)
    assert digest(got) == digest(pattern(size, 41)[lo:hi])
    part[10:20].write_from(np.full(10, 7, dtype=np.uint8), transport=transport).get(timeout=T)
    expected = pattern(size, 41)
    expected[lo + 10:lo + 20] = 7
    now = np.zeros(size, dtype=np.uint8)
    buf.read_into(now, transport=transport).get(timeout=T)
    assert digest(now) == digest(expected)
    assert pickle.loads(pickle.dumps(part)).size() == hi - lo
    assert buf[hi:lo].size() == 0 and buf[-10:].size() == 10
    with pytest.raises(ValueError, match="step 1"):
        buf[::2]
    with pytest.raises(TypeError, match=r"buf\[start:stop\]"):
        buf[3]
    if name is not None:
        a.forget.call_one(name).get(timeout=T)


@pytest.mark.parametrize("transport", [None, "tcp"])
def test_handle_passed_between_actors(a, b, transport) -> None:
    """Actor A owns, actor B reads and writes, the controller only passes the handle."""
    name, buf = make(a, "bytearray", 3 * MiB, seed=21)
    assert b.read.call_one(buf, transport).get(timeout=T) == digest(pattern(3 * MiB, 21))
    b.write.call_one(buf, 3 * MiB, 22, transport).get(timeout=T)
    assert a.digest.call_one(name).get(timeout=T) == digest(pattern(3 * MiB, 22))
    a.forget.call_one(name).get(timeout=T)


def test_proc_reads_controller_buffer_and_controller_local(b) -> None:
    data = pattern(2 * MiB, 31)
    buf = RDMABuffer(data)
    assert buf.transport_for().name == "local"
    assert b.read.call_one(buf).get(timeout=T) == digest(data)
    b.write.call_one(buf, MiB, 32).get(timeout=T)
    assert digest(data[:MiB]) == digest(pattern(MiB, 32))
    dst = bytearray(2 * MiB)
    buf.read_into(dst).get(timeout=T)  # same process: memmove
    assert digest(dst) == digest(data)
    buf.drop().get(timeout=T)
    with pytest.raises(BufferDroppedError):
        buf.read_into(dst).get(timeout=T)


def test_async_actor_awaits_transfers(procs, a) -> None:
    reader = procs.spawn("async_reader", AsyncReader).slice(procs=1)
    name, buf = make(a, "numpy", 8 * MiB, seed=41)
    for transport in (None, "unix"):
        assert reader.read.call_one(buf, transport).get(timeout=T) == digest(pattern(8 * MiB, 41))
    a.forget.call_one(name).get(timeout=T)


def test_rdma_action_batches(a, b) -> None:
    n1, buf1 = make(a, "numpy", MiB, seed=51)
    n2, buf2 = make(b, "numpy", 2 * MiB, seed=52)
    d1, d2 = np.empty(MiB, np.uint8), np.empty(2 * MiB, np.uint8)
    src = pattern(MiB, 53)
    action = RDMAAction().read_remote(d1, buf1).read_remote(d2, buf2).write_remote(buf2, src)
    action.submit().get(timeout=T)
    assert digest(d1) == digest(pattern(MiB, 51))
    assert b.digest.call_one(n2).get(timeout=T) in (
        digest(np.concatenate([src, pattern(2 * MiB, 52)[MiB:]])),)
    action.submit().get(timeout=T)  # may be submitted again
    with pytest.raises(ValueError, match="overlaps"):
        RDMAAction().read_remote(d2, buf1).read_remote(d2[10:], buf1)
    a.forget.call_one(n1).get(timeout=T)
    b.forget.call_one(n2).get(timeout=T)


# -- errors ------------------------------------------------------------------------------------
def test_size_and_layout_errors(a) -> None:
    name, buf = make(a, "numpy", 16, seed=1)
    with pytest.raises(ValueError, match=r"destination local memory size \(8\) must be >= "
                                         r"remote buffer size \(16\)"):
        buf.read_into(bytearray(8))
    with pytest.raises(ValueError, match=r"source local memory size \(32\) must be <= "):
        buf.write_from(bytearray(32))
    with pytest.raises(ValueError, match="contiguous"):
        buf.read_into(np.zeros(64, np.uint8)[::2])
    with pytest.raises(ValueError, match="read-only"):
        buf.read_into(b"x" * 16)
    frozen = np.zeros(16, np.uint8)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        buf.read_into(frozen)
    with pytest.raises(TypeError, match=r"expected a torch\.Tensor"):
        buf.read_into(12345)
    with pytest.raises(ValueError, match="unknown data-plane transport"):
        buf.read_into(bytearray(16), transport="carrier-pigeon")
    with pytest.raises(ValueError, match="timeout"):
        buf.read_into(bytearray(16), timeout=0)
    a.forget.call_one(name).get(timeout=T)


def test_buffer_construction_errors() -> None:
    with pytest.raises(ValueError, match="1-D"):
        RDMABuffer(np.zeros((4, 4), np.uint8))
    with pytest.raises(ValueError, match="contiguous"):
        RDMABuffer(np.zeros(64, np.uint8)[::2])
    with pytest.raises(ValueError, match="size 0"):
        RDMABuffer(bytearray())
    with pytest.raises(ValueError, match="1-D"):
        RDMABuffer(memoryview(bytearray(16)).cast("B", (4, 4)))
    with pytest.raises(TypeError):
        RDMABuffer("text")


def test_read_only_buffer_refuses_writes(b) -> None:
    data = bytes(pattern(1000, 61))
    buf = RDMABuffer(data)
    assert buf.readonly
    assert b.read.call_one(buf).get(timeout=T) == digest(data)
    with pytest.raises(ValueError, match="read-only"):
        buf.write_from(bytearray(10))
    buf.drop().get(timeout=T)


@pytest.mark.parametrize("transport", [None, *ALL])
def test_dropped_buffer_is_an_error_not_garbage(a, b, transport) -> None:
    name, buf = make(a, "numpy", MiB, seed=71)
    buf.drop().get(timeout=T)  # dropped by a holder of the handle, not the owner
    with pytest.raises(BufferDroppedError, match="dropped"):
        buf.read_into(bytearray(MiB), transport=transport).get(timeout=T)
    with pytest.raises(BufferDroppedError):
        buf.write_from(bytearray(MiB), transport=transport).get(timeout=T)
    assert "BufferDroppedError" in b.read_error.call_one(buf, transport).get(timeout=T)
    buf.drop().get(timeout=T)  # twice: harmless
    a.forget.call_one(name).get(timeout=T)


@pytest.mark.parametrize("size", [4096, 3 * MiB], ids=["small", "large"])
def test_dropped_by_owner(a, size) -> None:
    name, buf = make(a, "bytearray", size, seed=72)
    a.drop.call_one(name).get(timeout=T)
    a.forget.call_one(name).get(timeout=T)  # the memory may be freed and reused now
    for transport in ("vm", "tcp"):
        with pytest.raises(BufferDroppedError):
            buf.read_into(bytearray(size), transport=transport).get(timeout=T)
        with pytest.raises(BufferDroppedError):
            buf.write_from(bytearray(size), transport=transport).get(timeout=T)


def test_owner_gone_is_an_error() -> None:
    procs = this_host().spawn_procs(per_host={"procs": 1}, name="rdma-gone")
    owner = procs.spawn("holder", Holder)
    _, buf = make(owner, "numpy", MiB, seed=81)
    procs.stop().get(timeout=T)
    for transport in (None, "tcp"):
        with pytest.raises(RDMAError):
            buf.read_into(bytearray(MiB), transport=transport).get(timeout=T)


def test_timeout(a) -> None:
    name, buf = make(a, "numpy", 64 * MiB, seed=91)
    with pytest.raises(TimeoutError, match="did not finish in time"):
        buf.read_into(np.empty(64 * MiB, np.uint8), timeout=1e-4, transport="tcp").get(timeout=T)
    dst = np.empty(64 * MiB, np.uint8)
    buf.read_into(dst, transport="tcp").get(timeout=T)  # the pool recovered
    assert digest(dst) == digest(pattern(64 * MiB, 91))
    a.forget.call_one(name).get(timeout=T)


# -- transports ----------------------------------------------------------------------------
def test_transport_choice_is_reported(a, b) -> None:
    name, buf = make(a, "numpy", 4096, seed=1)
    here = buf.transport_for()
    assert here.name == "vm" and "process_vm_readv" in here.why
    assert b.transport.call_one(buf).get(timeout=T)[0] == "vm"
    assert describe_transport(peer_info()).name == "local"
    with pytest.raises(TypeError, match=r"expected a peer_info\(\) value .* not BufferOwner"):
        describe_transport(buf.owner)  # type: ignore[arg-type]
    assert buf.backend == "vm"
    assert buf.owner.pid != peer_info().pid and buf.owner.address.startswith(("unix:", "tcp:"))
    again = pickle.loads(pickle.dumps(buf))
    assert again.size() == 4096 and repr(again) == repr(buf)
    a.forget.call_one(name).get(timeout=T)


def test_env_forces_transport(a, monkeypatch) -> None:
    name, buf = make(a, "numpy", 4096, seed=2)
    monkeypatch.setenv("REGENCY_RDMA_TRANSPORT", "tcp")
    assert buf.transport_for().name == "tcp"
    dst = bytearray(4096)
    buf.read_into(dst).get(timeout=T)
    assert digest(dst) == digest(pattern(4096, 2))
    a.forget.call_one(name).get(timeout=T)


def test_vm_refused_falls_back_to_socket(a, monkeypatch) -> None:
    """Where ptrace rules refuse process_vm_readv (EPERM), the pair falls back, with a warning.

    As root the kernel never refuses, so the refusal is simulated in this (reader) process.
    """
    from regency._dataplane import _transfer

    name, buf = make(a, "numpy", 2 * MiB, seed=3)
    monkeypatch.setenv("REGENCY_RDMA_DENY_VM", "1")
    st = _transfer._st()
    warned, st.warned = st.warned, False
    try:
        dst = bytearray(2 * MiB)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            buf.read_into(dst).get(timeout=T)
        assert digest(dst) == digest(pattern(2 * MiB, 3))
        assert any(issubclass(w.category, RDMATcpFallbackWarning) for w in caught)
        choice = buf.transport_for()
        assert choice.name == "unix" and "EPERM" in choice.why
        with pytest.raises(ValueError, match="not usable"):
            buf.read_into(dst, transport="vm")
    finally:
        st.vm_denied.clear()
        st.warned = warned
    a.forget.call_one(name).get(timeout=T)
