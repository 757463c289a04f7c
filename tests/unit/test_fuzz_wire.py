"""Fuzzers of the frame decoder and the handshake (issue 19).

Short in CI (``REGENCY_FUZZ_EXAMPLES``, default 200 examples each); a long run::

    REGENCY_FUZZ_EXAMPLES=100000 .venv/bin/python -m pytest -q tests/unit/test_fuzz_wire.py

Nothing but ``ProtocolError`` may come out of hostile bytes, no side may authenticate
without the secret, and a declared size never allocates before its bytes come (lazy
buffers: tests/unit/test_limits.py).
"""

from __future__ import annotations

import os
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regency._wire import (
    ClientHandshake,
    FrameDecoder,
    ProtocolError,
    ServerHandshake,
    decode_inbound,
    encode_frame,
)

EXAMPLES = int(os.environ.get("REGENCY_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SECRET = b"k" * 32


def _valid_frame() -> st.SearchStrategy[bytes]:
    bufs = st.lists(st.binary(max_size=300), min_size=1, max_size=5)
    return bufs.map(lambda b: b"".join(bytes(x) for x in encode_frame(b)))


def _mutated(data: bytes, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for pos, value in flips:
        if out:
            out[pos % len(out)] = value
    return bytes(out)


@FUZZ
@given(frames=st.lists(_valid_frame(), max_size=4),
       flips=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=6),
       tail=st.binary(max_size=64), chunk=st.integers(1, 97))
def test_frames_fuzzed_raise_only_protocol_error(frames: list[bytes],
                                                 flips: list[tuple[int, int]], tail: bytes,
                                                 chunk: int) -> None:
    data = _mutated(b"".join(frames), flips) + tail
    dec = FrameDecoder(max_frame_bytes=1 << 20, allocate=bytearray)
    try:
        for i in range(0, len(data), chunk):
            dec.feed(data[i:i + chunk])
            while (frame := dec.next_frame()) is not None:
                try:
                    decode_inbound(frame)
                except ProtocolError:
                    pass
    except ProtocolError:
        pass


@FUZZ
@given(lengths=st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=8))
def test_declared_sizes_are_checked_before_any_allocation(lengths: list[int]) -> None:
    asked: list[int] = []

    def allocate(n: int) -> bytearray:
        asked.append(n)
        return bytearray(n)

    dec = FrameDecoder(max_frame_bytes=1 << 20, allocate=allocate)
    prefix = struct.pack(f"!2sBxI{len(lengths)}Q", b"RG", 1, len(lengths), *lengths)
    try:
        dec.feed(prefix)
    except ProtocolError:
        return
    assert all(n <= 1 << 20 for n in asked)


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, 4096), st.integers(0, 255)), max_size=4),
       cut=st.integers(0, 400), chunk=st.integers(1, 64), to_server=st.booleans())
def test_handshakes_fuzzed_never_authenticate_or_raise(flips: list[tuple[int, int]], cut: int,
                                                       chunk: int, to_server: bool) -> None:
    """Mutate the messages of a real exchange in flight: a side may fail, never raise, and
    a mutated exchange never completes with a changed transcript on only one side."""
    client = ClientHandshake(SECRET, "1.0", "tcp://a:1")
    server = ServerHandshake(SECRET, "1.0")
    for _ in range(6):
        c2s = client.data_to_send()
        s2c = server.data_to_send()
        if not c2s and not s2c:
            break
        if to_server:
            c2s = _mutated(c2s, flips)[: cut or None]
        else:
            s2c = _mutated(s2c, flips)[: cut or None]
        for i in range(0, len(c2s), chunk):
            server.receive_data(c2s[i:i + chunk])
        for i in range(0, len(s2c), chunk):
            client.receive_data(s2c[i:i + chunk])
    assert not (client.failed and client.done) and not (server.failed and server.done)
    if client.done:
        assert server.done  # the client trusts only a server that checked its proof


@FUZZ
@given(secret=st.binary(min_size=1, max_size=40), garbage=st.binary(max_size=300))
def test_a_guessing_client_never_gets_the_servers_proof(secret: bytes, garbage: bytes) -> None:
    server = ServerHandshake(SECRET, "1.0")
    guess = ClientHandshake(secret if secret != SECRET else b"x", "1.0", "g")
    server.receive_data(guess.data_to_send())
    guess.receive_data(server.data_to_send())
    server.receive_data(guess.data_to_send() + garbage)
    out = server.data_to_send()
    assert server.failed and not server.done
    assert out[:4] == b"RGHS" and out[4] == 5  # REJECT only: no OK, no proof
