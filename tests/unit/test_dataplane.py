"""Data plane, without procs: transport rules, memory rules, registry, process_vm, and the
data-connection server and client in one process."""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from regency._dataplane import _proto, _vm
from regency._dataplane._choice import choose
from regency._dataplane._client import Pool, read_ranges, transfer
from regency._dataplane._errors import BufferDroppedError, RDMAError
from regency._dataplane._handle import Descriptor
from regency._dataplane._identity import PeerInfo, peer_info
from regency._dataplane._memory import buffer_region, local_region
from regency._dataplane._registry import Registry
from regency._dataplane._server import DataServer
from regency._dataplane._sockets import connect, move_views
from regency.errors import AuthenticationError

ME = PeerInfo(hostname="h1", host_key="boot:1", pid_ns=10, net_ns=20, pid=100, uid=0,
              vm_syscalls=True, ptrace_scope=None)


def other(**changes) -> PeerInfo:
    return dataclasses.replace(ME, **{"pid": 101, **changes})


# -- transport rules ----------------------------------------------------------------------------
def test_choice_by_identity() -> None:
    assert choose(ME, ME).name == "local"
    vm = choose(ME, other())
    assert vm.name == "vm" and "process_vm_readv" in vm.why
    assert choose(ME, other(pid_ns=11)).name == "unix"
    assert choose(ME, other(pid_ns=11), has_unix=False).name == "tcp"
    assert choose(ME, other(pid_ns=11, net_ns=21)).name == "tcp"
    far = choose(ME, other(host_key="boot:2", hostname="h2"))
    assert far.name == "tcp" and "h1 -> h2" in far.why
    assert str(far).startswith("tcp: ")


def test_choice_when_vm_is_refused_or_missing() -> None:
    denied = choose(dataclasses.replace(ME, ptrace_scope=1), other(), vm_denied=True)
    assert denied.name == "unix" and "EPERM" in denied.why and "ptrace_scope=1" in denied.why
    missing = choose(dataclasses.replace(ME, vm_syscalls=False), other())
    assert missing.name == "unix" and "not available" in missing.why


def test_forced_transports() -> None:
    assert choose(ME, other(), forced="tcp") == ("tcp", "forced (tcp)")
    assert choose(ME, other(), forced="unix").name == "unix"
    assert choose(ME, other(), forced="auto").name == "vm"
    assert choose(ME, ME, forced="vm").name == "vm"
    with pytest.raises(ValueError, match="unknown"):
        choose(ME, other(), forced="rdma")
    with pytest.raises(ValueError, match="one host"):
        choose(ME, other(host_key="boot:2"), forced="vm")
    with pytest.raises(ValueError, match="not usable"):
        choose(ME, other(), forced="vm", vm_denied=True)
    with pytest.raises(ValueError, match="owner process"):
        choose(ME, other(), forced="local")
    with pytest.raises(ValueError, match="Unix data socket"):
        choose(ME, other(), forced="unix", has_unix=False)


def test_choice_for_cuda_memory() -> None:
    """``ipc``: "" when CUDA IPC is usable, else why not; None for host memory."""
    ipc = choose(ME, other(), ipc="")
    assert ipc.name == "cuda_ipc" and "IPC handle" in ipc.why
    assert choose(ME, ME, ipc="").name == "local"
    staged = choose(ME, other(), ipc="the owner could not export an IPC handle")
    assert staged.name == "unix" and "staged through pinned host memory" in staged.why
    assert choose(ME, other(), ipc="", vm_denied=True).name == "unix"  # no validity check
    assert choose(ME, other(host_key="boot:2", hostname="h2"), ipc="").name == "tcp"
    assert choose(ME, other(), ipc="", forced="cuda_ipc").name == "cuda_ipc"
    assert choose(ME, other(), ipc="", forced="tcp").name == "tcp"
    with pytest.raises(ValueError, match="cannot reach CUDA memory"):
        choose(ME, other(), ipc="", forced="vm")
    with pytest.raises(ValueError, match="needs a buffer of CUDA memory"):
        choose(ME, other(), forced="cuda_ipc")
    with pytest.raises(ValueError, match="not usable: no device"):
        choose(ME, other(), ipc="no device", forced="cuda_ipc")
    with pytest.raises(ValueError, match="one host"):
        choose(ME, other(host_key="boot:2"), ipc="", forced="cuda_ipc")


def test_lent_registrations_count_down_their_takers() -> None:
    reg = Registry()
    region = buffer_region(bytearray(8))
    lent = reg.register(region, takers=2)
    plain = reg.register(region)
    assert reg.lends() == 1 and len(reg) == 2
    assert not reg.taken(lent.reg_id, lent.key)
    assert reg.taken(lent.reg_id, lent.key)  # the last taker drops it
    assert reg.lends() == 0 and len(reg) == 1
    assert not reg.taken(lent.reg_id, lent.key)  # late or repeated: harmless
    assert reg.drop(plain.reg_id, plain.key)


def test_peer_info_of_this_process() -> None:
    me = peer_info()
    assert me.pid == os.getpid() and me.same_process(me)
    assert me.host_key and me.pid_ns and me.net_ns


# -- memory rules -------------------------------------------------------------------------------
def test_buffer_region_rules() -> None:
    arr = np.arange(10, dtype=np.float32)
    r = buffer_region(arr)
    assert (r.address, r.nbytes, r.readonly, r.kind, r.dtype) == (
        arr.ctypes.data, 40, False, "numpy", "float32")
    with pytest.raises(ValueError, match="1-D"):
        buffer_region(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="C-contiguous"):
        buffer_region(np.zeros(8)[::2])
    with pytest.raises(ValueError, match="size 0"):
        buffer_region(np.zeros(0))
    ba = bytearray(b"hello")
    r = buffer_region(ba)
    assert r.nbytes == 5 and not r.readonly and bytes(r.view()) == b"hello"
    with pytest.raises(BufferError):
        ba.extend(b"!")  # registered memory cannot move while the region holds it
    assert buffer_region(b"abc").readonly
    assert buffer_region(memoryview(bytearray(4)).toreadonly()).readonly
    with pytest.raises(ValueError, match="1-D"):
        buffer_region(memoryview(bytearray(4)).cast("B", (2, 2)))
    with pytest.raises(TypeError, match=r"expected a torch\.Tensor"):
        buffer_region(3.5)


def test_local_region_rules() -> None:
    grid = np.zeros((4, 4), np.uint8)
    assert local_region(grid, writable=True, what="dst").nbytes == 16  # any shape, contiguous
    with pytest.raises(ValueError, match="C-contiguous"):
        local_region(grid[:, ::2], writable=True, what="dst")
    with pytest.raises(ValueError, match="read-only"):
        local_region(b"abc", writable=True, what="dst")
    assert local_region(b"abc", writable=False, what="src").nbytes == 3
    r = local_region(grid, writable=True, what="dst")
    r.view()[5] = 9
    assert grid.reshape(-1)[5] == 9


def test_torch_regions() -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float64)
    r = buffer_region(t)
    assert (r.address, r.nbytes, r.kind, r.dtype) == (t.data_ptr(), 48, "torch", "float64")
    assert buffer_region(t[2:]).address == t.data_ptr() + 16  # a 1-D slice is fine
    with pytest.raises(ValueError, match="1-D"):
        buffer_region(t.view(2, 3))
    with pytest.raises(ValueError, match="contiguous"):
        buffer_region(t[::2])
    with pytest.raises(ValueError, match="size 0"):
        buffer_region(torch.empty(0))
    with pytest.raises(ValueError, match="device 'meta'"):
        buffer_region(torch.empty(4, device="meta"))
    assert local_region(t.view(2, 3), writable=True, what="dst").nbytes == 48
    with pytest.raises(ValueError, match="contiguous"):
        local_region(t.view(2, 3).t(), writable=True, what="dst")


# -- registry ---------------------------------------------------------------------------------
def test_registry_slots_track_drops() -> None:
    reg = Registry()
    data = bytearray(b"x" * 64)
    r = reg.register(buffer_region(data))
    assert reg.lookup(r.reg_id, r.key) is r
    assert _vm.read_u64(os.getpid(), r.slot_addr) == r.key if _vm.available() else True
    with pytest.raises(BufferDroppedError):
        reg.lookup(r.reg_id, r.key + 2)
    assert reg.drop(r.reg_id, r.key) and not reg.drop(r.reg_id, r.key)
    with pytest.raises(BufferDroppedError, match="dropped"):
        reg.lookup(r.reg_id, r.key)
    import ctypes

    assert ctypes.c_uint64.from_address(r.slot_addr).value == 0
    again = reg.register(buffer_region(data))
    assert again.slot_addr == r.slot_addr and again.key != r.key and again.reg_id != r.reg_id
    many = [reg.register(buffer_region(data)) for _ in range(1500)]  # a second block of slots
    assert len({m.slot_addr for m in many}) == 1500 and len(reg) == 1501


# -- process_vm -------------------------------------------------------------------------------
needs_vm = pytest.mark.skipif(not _vm.available(), reason="no process_vm_readv here")


@needs_vm
def test_vm_copy_on_own_process() -> None:
    src = np.arange(3 << 20, dtype=np.uint8)
    dst = np.zeros_like(src)
    _vm.copy(os.getpid(), dst.ctypes.data, src.ctypes.data, src.nbytes, write=False)
    assert np.array_equal(dst, src)
    back = np.full(100, 7, np.uint8)
    _vm.copy(os.getpid(), back.ctypes.data, dst.ctypes.data, 100, write=True)
    assert (dst[:100] == 7).all()


@needs_vm
def test_vm_errors(monkeypatch) -> None:
    word = np.zeros(1, np.uint64)
    with pytest.raises(_vm.VmGone):
        _vm.read_u64(2**31 - 2, word.ctypes.data)
    with pytest.raises(OSError):
        _vm.read_u64(os.getpid(), 8)  # unmapped address: EFAULT
    _vm.check_hook()
    monkeypatch.setenv("REGENCY_RDMA_DENY_VM", "1")
    with pytest.raises(_vm.VmDenied):
        _vm.check_hook()


@needs_vm
def test_vm_gather_reads_pieces_in_order() -> None:
    src = np.arange(64, dtype=np.uint8)
    dst = np.zeros(80, dtype=np.uint8)
    a = dst.ctypes.data
    _vm.gather(os.getpid(), [(a, src.ctypes.data + 60, 4), (a + 4, src.ctypes.data, 64),
                             (a + 68, src.ctypes.data, 2)])
    assert list(dst[:4]) == [60, 61, 62, 63] and np.array_equal(dst[4:68], src)
    assert list(dst[68:70]) == [0, 1]
    with pytest.raises(OSError):
        _vm.gather(os.getpid(), [(a, src.ctypes.data, 4), (a + 4, 8, 4)])  # second unmapped


# -- data connections: server and client in one process ----------------------------------------
SECRET = b"s" * 32


@pytest.fixture(scope="module")
def server():
    srv = DataServer(SECRET, Registry(), job="unit", tcp_host="127.0.0.1")
    yield srv
    srv.close()


def _desc(server: DataServer, data) -> Descriptor:
    r = server.registry.register(buffer_region(data))
    return Descriptor(reg_id=r.reg_id, key=r.key, size=r.region.nbytes,
                      readonly=r.region.readonly, address=r.region.address,
                      slot_addr=r.slot_addr, owner=peer_info(), control="unix:@none",
                      unix=server.unix, tcp=server.tcp)


@pytest.mark.parametrize("which", ["unix", "tcp"])
def test_socket_read_write(server, which) -> None:
    data = np.random.default_rng(1).integers(0, 256, 5 << 20, dtype=np.uint8)
    desc = _desc(server, data)
    addr = server.unix if which == "unix" else server.tcp
    assert addr is not None
    pool, deadline = Pool(), time.monotonic() + 10
    out = bytearray(desc.size)
    transfer(pool, addr, SECRET, desc, _proto.READ, memoryview(out), 0, deadline)
    assert out == data.tobytes()
    expected = data.copy()
    expected[4096:5096] = 1
    transfer(pool, addr, SECRET, desc, _proto.WRITE, memoryview(bytearray(b"\x01" * 1000)),
             4096, deadline)
    assert np.array_equal(data, expected)
    pool.close_all()


def test_socket_errors_keep_the_connection(server) -> None:
    data = bytearray(100)
    desc = _desc(server, data)
    pool, deadline = Pool(), time.monotonic() + 10
    with pytest.raises(RDMAError, match="past the end"):
        transfer(pool, server.tcp, SECRET, desc, _proto.READ, memoryview(bytearray(10)), 95,
                 deadline)
    frozen = _desc(server, bytes(10))
    with pytest.raises(RDMAError, match="read-only"):
        transfer(pool, server.tcp, SECRET, frozen, _proto.WRITE, memoryview(b"x"), 0, deadline)
    server.registry.drop(desc.reg_id, desc.key)
    with pytest.raises(BufferDroppedError):
        transfer(pool, server.tcp, SECRET, desc, _proto.READ, memoryview(bytearray(10)), 0,
                 deadline)
    assert sum(len(v) for v in pool._idle.values()) == 1  # one connection, reused throughout
    pool.close_all()


def test_socket_wrong_secret_is_refused(server) -> None:
    desc = _desc(server, bytearray(10))
    with pytest.raises(AuthenticationError):
        transfer(Pool(), server.tcp, b"w" * 32, desc, _proto.READ, memoryview(bytearray(10)),
                 0, time.monotonic() + 10)


def test_socket_deadline(server) -> None:
    desc = _desc(server, bytearray(10))
    with pytest.raises(TimeoutError):
        transfer(Pool(), server.tcp, SECRET, desc, _proto.READ, memoryview(bytearray(10)), 0,
                 time.monotonic() - 1)


@pytest.mark.parametrize("which", ["unix", "tcp"])
def test_many_ranges_in_one_request(server, which) -> None:
    """READV: ranges of any size, in any order, some empty, into scattered places."""
    data = np.random.default_rng(2).integers(0, 256, 3 << 20, dtype=np.uint8)
    desc = _desc(server, data)
    addr = server.unix if which == "unix" else server.tcp
    assert addr is not None
    rng = np.random.default_rng(3)
    pieces, at = [], 0
    for _ in range(1000):
        n = int(rng.choice([0, 1, 7, 4096, 70_000]))
        r = int(rng.integers(0, data.size - n + 1))
        pieces.append((r, at, n))
        at += n + 3  # a gap in the destination
    out = bytearray(at)
    pool = Pool()
    read_ranges(pool, addr, SECRET, desc, memoryview(out), pieces, time.monotonic() + 10)
    for r, at, n in pieces:
        assert out[at:at + n] == data[r:r + n].tobytes()
    assert sum(len(v) for v in pool._idle.values()) == 1
    pool.close_all()


def test_many_ranges_errors(server) -> None:
    desc = _desc(server, bytearray(100))
    pool, deadline = Pool(), time.monotonic() + 10
    out = memoryview(bytearray(100))
    with pytest.raises(RDMAError, match="past the end"):
        read_ranges(pool, server.tcp, SECRET, desc, out, [(0, 0, 10), (95, 10, 10)], deadline)
    read_ranges(pool, server.tcp, SECRET, desc, out, [(90, 0, 10)], deadline)  # same connection
    assert sum(len(v) for v in pool._idle.values()) == 1
    server.registry.drop(desc.reg_id, desc.key)
    with pytest.raises(BufferDroppedError):
        read_ranges(pool, server.tcp, SECRET, desc, out, [(0, 0, 10)], deadline)
    pool.close_all()


def test_many_ranges_checked_before_sending(server) -> None:
    desc = _desc(server, bytearray(100))
    pool, deadline = Pool(), time.monotonic() + 10
    out = memoryview(bytearray(10))
    with pytest.raises(ValueError, match="does not fit"):
        read_ranges(pool, server.tcp, SECRET, desc, out, [(0, 5, 6)], deadline)
    with pytest.raises(ValueError, match="0 ranges"):
        read_ranges(pool, server.tcp, SECRET, desc, out, [], deadline)
    assert not pool._idle  # nothing was sent


@pytest.mark.parametrize("count", [0, _proto.MAX_RANGES + 1])
def test_a_bad_range_count_ends_the_connection(server, count) -> None:
    desc = _desc(server, bytearray(100))
    sock = connect(server.tcp, SECRET, _proto.VERSION, "unit", 10)
    sock.settimeout(10)
    sock.sendall(_proto.REQUEST.pack(_proto.MAGIC, _proto.READV, desc.reg_id, desc.key, 0,
                                     count))
    assert sock.recv(16) == b""  # closed: what follows such a request cannot be read
    sock.close()


@given(sizes=st.lists(st.integers(0, 50), max_size=40),
       steps=st.lists(st.integers(1, 60), min_size=1, max_size=20))
def test_move_views_resumes_partial_calls(sizes: list[int], steps: list[int]) -> None:
    """Whatever each call moves, every byte lands once, in order."""
    src = bytes(range(256)) * 10
    views = [memoryview(bytearray(n)) for n in sizes]
    pos, calls = [0], [0]

    def io(buffers: list[memoryview]) -> int:  # a recvmsg_into that fills a few bytes
        budget = steps[calls[0] % len(steps)]
        calls[0] += 1
        moved = 0
        for b in buffers:
            take = min(len(b), budget - moved)
            b[:take] = src[pos[0]:pos[0] + take]
            pos[0] += take
            moved += take
            if moved == budget:
                break
        return moved

    move_views(io, views)
    assert b"".join(bytes(v) for v in views) == src[:sum(sizes)]


def test_move_views_counts_bytes_of_any_format() -> None:
    src = bytes(range(24))
    floats = memoryview(bytearray(16)).cast("f")  # 4 items, 16 bytes
    got = [0]

    def io(buffers: list[memoryview]) -> int:
        n = min(5, sum(b.nbytes for b in buffers))  # a few bytes a call
        moved = 0
        for b in buffers:
            take = min(b.nbytes, n - moved)
            b[:take] = src[got[0]:got[0] + take]
            got[0] += take
            moved += take
        return moved

    tail = memoryview(bytearray(8))
    move_views(io, [floats, tail])
    assert bytes(floats.cast("B")) + bytes(tail) == src


def test_move_views_sees_a_closed_peer() -> None:
    with pytest.raises(ConnectionResetError):
        move_views(lambda buffers: 0, [memoryview(bytearray(3))])


def test_protocol_layouts() -> None:
    assert _proto.REQUEST.size == 40 and _proto.REPLY.size == 16 and _proto.RANGE.size == 16
