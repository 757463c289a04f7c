"""The listener's limits (backoff, admission of pending handshakes, failure penalties) and
the rate-limited log helper: pure logic, no sockets."""

from __future__ import annotations

import errno
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regency._ratelog import RateLimitedLog
from regency._transport._limits import Admission, Backoff, Failures, transient_accept_error


def test_transient_accept_errors() -> None:
    for code in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS):
        assert transient_accept_error(OSError(code, "x"))
    assert not transient_accept_error(OSError(errno.EBADF, "x"))


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    b = Backoff(0.01, 1.0)
    assert not b.in_episode
    delays = [b.next() for _ in range(10)]
    assert delays[:3] == [0.01, 0.02, 0.04]
    assert max(delays) == 1.0 and delays[-1] == 1.0
    assert b.in_episode and b.failures == 10
    b.reset()
    assert not b.in_episode and b.next() == 0.01


def test_admission_evicts_the_oldest_of_the_same_source() -> None:
    a: Admission[str] = Admission(max_pending=100, max_per_source=2)
    assert a.admit("x1", "10.0.0.1") == []
    assert a.admit("x2", "10.0.0.1") == []
    assert a.admit("y1", "10.0.0.2") == []
    assert a.admit("x3", "10.0.0.1") == ["x1"]  # not y1: another source
    assert a.pending("10.0.0.1") == 2 and a.pending() == 3
    a.done("x1")  # already evicted: a no-op
    a.done("x2")
    assert a.pending("10.0.0.1") == 1
    assert a.evicted == 1


def test_admission_bounds_the_total_and_local_peers() -> None:
    a: Admission[int] = Admission(max_pending=3, max_per_source=3)
    for i in range(3):
        assert a.admit(i, None) == []
    assert a.admit(3, "10.0.0.9") == [0]
    assert a.pending() == 3


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.booleans()),
                max_size=200))
def test_admission_never_exceeds_its_bounds(ops: list[tuple[str | None, bool]]) -> None:
    a: Admission[int] = Admission(max_pending=5, max_per_source=2)
    live: list[int] = []
    for n, (source, finish) in enumerate(ops):
        for old in a.admit(n, source):
            live.remove(old)
        live.append(n)
        if finish and live:
            a.done(live.pop(0))
        assert a.pending() == len(live) <= 5
        for src in ("a", "b", "c"):
            assert a.pending(src) <= 2


def test_failures_grow_the_penalty_and_forget_after_quiet() -> None:
    now = [0.0]
    f = Failures(first=0.01, cap=1.0, forget_after=60, clock=lambda: now[0])
    penalties = [f.penalty("10.0.0.1") for _ in range(12)]
    assert penalties[0] == 0.01 and penalties[1] == 0.02 and penalties[-1] == 1.0
    assert f.penalty("10.0.0.2") == 0.01  # per source
    now[0] = 120.0
    assert f.penalty("10.0.0.1") == 0.01


def test_rate_limited_log_lets_a_burst_through_then_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    rl = RateLimitedLog(logging.getLogger("regency.test.ratelog"), burst=3, interval=10,
                        clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="regency.test.ratelog"):
        written = [rl.warning("k", "line %d", i) for i in range(100)]
        assert written.count(True) == 3
        assert rl.suppressed("k") == 97
        assert rl.warning("other", "another key")  # keys are independent
        now[0] = 10.0
        assert rl.warning("k", "again")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:3] == ["line 0", "line 1", "line 2"]
    assert lines[-1] == "again (97 similar lines suppressed)"
    assert len(lines) == 5


def test_rate_limited_log_bounds_its_keys(caplog: pytest.LogCaptureFixture) -> None:
    rl = RateLimitedLog(logging.getLogger("regency.test.ratelog2"), burst=1, interval=1e9,
                        max_keys=10)
    with caplog.at_level(logging.WARNING, logger="regency.test.ratelog2"):
        written = sum(rl.warning(f"key{i}", "x") for i in range(1000))
    assert written <= 11
    assert len(rl._keys) <= 11


def test_large_receive_buffers_are_committed_as_bytes_arrive() -> None:
    """A 256 MiB destination costs no resident memory until written, then only the pages
    written; frames decoded into it are ordinary writable views."""
    from pathlib import Path

    from regency._transport._buffers import LAZY_BUFFER_BYTES, allocate_buffer
    from regency._wire import FrameDecoder, encode_frame

    def rss_kib() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    assert isinstance(allocate_buffer(1024), bytearray)
    before = rss_kib()
    big = allocate_buffer(256 << 20)
    assert len(big) == 256 << 20
    assert rss_kib() - before < 8 * 1024
    view = memoryview(big)
    view[: 1 << 20] = b"x" * (1 << 20)
    assert rss_kib() - before < 16 * 1024
    del view, big
    dec = FrameDecoder(allocate=allocate_buffer)
    payload = bytes(range(256)) * (LAZY_BUFFER_BYTES // 256)
    for part in encode_frame([b"h", payload]):
        dec.feed(part)
    frame = dec.next_frame()
    assert frame is not None and bytes(frame[1]) == payload and not frame[1].readonly
