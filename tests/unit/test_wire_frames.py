"""Frame codec: round trips under arbitrary chunking, zero-copy receive, hostile input."""

from __future__ import annotations

import array
import ast
import pathlib
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import regency._wire as wire
from regency._wire import PROTOCOL_VERSION, FrameDecoder, ProtocolError, encode_frame
from regency._wire._frames import LARGE_BUFFER_BYTES, MAX_ATTACHMENT_BYTES

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

sizes = st.one_of(st.integers(0, 64), st.integers(0, 300_000))
frame_shapes = st.lists(st.lists(sizes, min_size=1, max_size=8), min_size=1, max_size=3)


def make_frames(shapes: list[list[int]], seed: int) -> list[list[bytes]]:
    """Random contents for frames of the given buffer sizes."""
    rng = random.Random(seed)
    return [[rng.randbytes(size) for size in shape] for shape in shapes]


def stream_of(frames: list[list[bytes]]) -> bytes:
    return b"".join(b"".join(encode_frame(frame)) for frame in frames)


def drain(decoder: FrameDecoder) -> list[list[bytes]]:
    out = []
    while (frame := decoder.next_frame()) is not None:
        out.append([bytes(buf) for buf in frame])
    return out


def socket_read(decoder: FrameDecoder, data: memoryview, limit: int) -> tuple[int, memoryview]:
    """Act like recv_into: copy at most *limit* bytes into the decoder's buffer."""
    view = decoder.get_buffer(-1)
    assert len(view) > 0
    count = min(len(view), limit, len(data))
    view[:count] = data[:count]
    decoder.buffer_updated(count)
    return count, view


# -- round trips -----------------------------------------------------------------------


@SETTINGS
@given(shapes=frame_shapes, seed=st.integers(0, 2**32), data=st.data())
def test_feed_roundtrip_arbitrary_chunks(shapes, seed, data):
    frames = make_frames(shapes, seed)
    stream = stream_of(frames)
    cuts = sorted(
        set(data.draw(st.lists(st.integers(0, len(stream)), max_size=40), label="cuts"))
    )
    decoder = FrameDecoder()
    got = []
    previous = 0
    for cut in [*cuts, len(stream)]:
        decoder.feed(stream[previous:cut])
        got += drain(decoder)
        previous = cut
    assert got == frames
    assert decoder.at_frame_boundary


@SETTINGS
@given(
    shapes=st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=5), min_size=1, max_size=3),
    seed=st.integers(0, 2**32),
)
def test_feed_byte_at_a_time(shapes, seed):
    frames = make_frames(shapes, seed)
    stream = stream_of(frames)
    decoder = FrameDecoder()
    got = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        got += drain(decoder)
    assert got == frames


@SETTINGS
@given(
    shapes=frame_shapes,
    seed=st.integers(0, 2**32),
    reads=st.lists(st.integers(1, 200_000), min_size=1, max_size=20),
)
def test_get_buffer_roundtrip_random_reads(shapes, seed, reads):
    frames = make_frames(shapes, seed)
    stream = memoryview(stream_of(frames))
    decoder = FrameDecoder()
    got = []
    step = 0
    while stream:
        count, _ = socket_read(decoder, stream, reads[step % len(reads)])
        stream = stream[count:]
        step += 1
        got += drain(decoder)
    assert got == frames


@SETTINGS
@given(shapes=frame_shapes, seed=st.integers(0, 2**32), data=st.data())
def test_mixed_feed_and_get_buffer(shapes, seed, data):
    frames = make_frames(shapes, seed)
    stream = memoryview(stream_of(frames))
    decoder = FrameDecoder()
    got = []
    while stream:
        size = data.draw(st.integers(1, 150_000), label="size")
        if data.draw(st.booleans(), label="use_feed"):
            decoder.feed(stream[:size])
            stream = stream[size:]
        else:
            count, _ = socket_read(decoder, stream, size)
            stream = stream[count:]
        got += drain(decoder)
    assert got == frames


def test_frames_split_in_every_place_around_a_large_buffer():
    frames = make_frames([[3, LARGE_BUFFER_BYTES + 5, 0, 7], [0], [LARGE_BUFFER_BYTES]], 7)
    stream = stream_of(frames)
    for cut in [*range(80), *range(LARGE_BUFFER_BYTES - 10, LARGE_BUFFER_BYTES + 120)]:
        decoder = FrameDecoder()
        decoder.feed(stream[:cut])
        decoder.feed(stream[cut:])
        assert drain(decoder) == frames


def test_many_small_frames_through_uneven_reads():
    rng = random.Random(3)
    shapes = [[rng.randrange(0, 50_000) for _ in range(rng.randrange(1, 4))] for _ in range(300)]
    frames = make_frames(shapes, 4)
    stream = memoryview(stream_of(frames))
    decoder = FrameDecoder()
    got = []
    while stream:
        count, _ = socket_read(decoder, stream, rng.randrange(1, 120_000))
        stream = stream[count:]
        got += drain(decoder)
    assert got == frames


def test_buffers_are_writable_memoryviews():
    decoder = FrameDecoder()
    decoder.feed(b"".join(encode_frame([b"head", b"x" * 10, b"y" * LARGE_BUFFER_BYTES])))
    frame = decoder.next_frame()
    assert frame is not None
    for buf in frame:
        assert isinstance(buf, memoryview)
        assert not buf.readonly
    assert decoder.next_frame() is None


def test_many_buffers_and_grown_scratch():
    count = 40_000  # the prefix alone (320 KB) is bigger than the scratch area
    frame = [bytes([i % 256]) * (i % 3) for i in range(count)]
    stream = memoryview(b"".join(encode_frame(frame)))
    decoder = FrameDecoder(max_buffers=count)
    while stream:
        done, _ = socket_read(decoder, stream, 70_000)
        stream = stream[done:]
    assert drain(decoder) == [frame]


# -- zero copy -------------------------------------------------------------------------


def test_large_buffer_lands_in_its_final_buffer():
    payload = random.Random(1).randbytes(8 << 20)
    stream = memoryview(b"".join(encode_frame([b"h" * 100, payload])))
    decoder = FrameDecoder()
    via_scratch = 0
    views = []
    while stream:
        count, view = socket_read(decoder, stream, 64 * 1024)
        stream = stream[count:]
        views.append((view, count))
    frame = decoder.next_frame()
    assert frame is not None
    assert bytes(frame[0]) == b"h" * 100
    assert frame[1] == payload
    final = frame[1].obj
    assert isinstance(final, bytearray)
    assert len(final) == len(payload)
    direct = sum(count for view, count in views if view.obj is final)
    via_scratch = sum(count for view, count in views if view.obj is not final)
    assert direct >= len(payload) - 64 * 1024
    assert via_scratch <= 64 * 1024


# -- encoding ---------------------------------------------------------------------------


def test_encode_returns_prefix_then_uncopied_buffers():
    raw = b"abc"
    mutable = bytearray(b"defg")
    parts = encode_frame([raw, mutable, memoryview(b"")])
    assert len(parts) == 4
    assert isinstance(parts[0], bytes)
    assert parts[0] == struct.pack("!2sBxI3Q", b"RG", PROTOCOL_VERSION, 3, 3, 4, 0)
    assert parts[1] is raw
    assert isinstance(parts[2], memoryview)
    assert parts[2].obj is mutable


def test_encode_typed_and_multidimensional_views():
    doubles = array.array("d", [1.5, 2.5, 3.5, 4.5, 5.5, 6.5])
    flat = memoryview(doubles)
    grid = flat.cast("B").cast("d", shape=[2, 3])
    strided = memoryview(bytes(range(20)))[::2]
    parts = encode_frame([flat, grid, strided])
    lengths = struct.unpack_from("!3Q", parts[0], 8)
    assert lengths == (48, 48, 10)
    for part in parts[1:]:
        assert isinstance(part, memoryview)
        assert part.format == "B"
        assert part.ndim == 1
    doubles[0] = 9.0  # the views share the array's memory: nothing was copied
    assert bytes(parts[1])[:8] == bytes(parts[2])[:8] == struct.pack("d", 9.0)
    doubles[0] = 1.5
    decoder = FrameDecoder()
    decoder.feed(b"".join(parts))
    frame = decoder.next_frame()
    assert frame is not None
    assert bytes(frame[0]) == doubles.tobytes() == bytes(frame[1])
    assert bytes(frame[2]) == bytes(range(0, 20, 2))


def test_encode_needs_a_buffer():
    with pytest.raises(ValueError):
        encode_frame([])


# -- hostile input ---------------------------------------------------------------------


def _prefix(nbufs: int, *lengths: int, magic: bytes = b"RG", version: int = 1) -> bytes:
    return struct.pack(f"!2sBxI{len(lengths)}Q", magic, version, nbufs, *lengths)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (_prefix(1, 0, magic=b"XG"), "magic"),
        (_prefix(1, 0, magic=b"RH"), "magic"),
        (_prefix(1, 0, version=2), "version"),
        (_prefix(0), "no buffers"),
        (_prefix(0xFFFFFFFF), "buffers"),
        (_prefix(4097), "buffers"),
        (_prefix(2, 2**64 - 1, 2**64 - 1), "limit"),
        (_prefix(1, (1 << 40) + 1), "limit"),
        (_prefix(3, 1 << 39, 1 << 39, 1), "limit"),
        (b"GET / HTTP/1.1\r\n\r\n", "magic"),
    ],
)
def test_corrupt_prefix_raises_at_once(data, needle):
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError, match=needle):
        decoder.feed(data)


def test_header_limit():
    decoder = FrameDecoder(max_header_bytes=10)
    decoder.feed(b"".join(encode_frame([b"x" * 10, b"y" * 100])))
    with pytest.raises(ProtocolError, match="header"):
        decoder.feed(b"".join(encode_frame([b"x" * 11])))


def test_failed_decoder_stays_failed_but_hands_out_earlier_frames():
    decoder = FrameDecoder()
    good = b"".join(encode_frame([b"ok"]))
    with pytest.raises(ProtocolError):
        decoder.feed(good + b"garbage!")
    assert decoder.next_frame() == [b"ok"]
    with pytest.raises(ProtocolError):
        decoder.next_frame()
    with pytest.raises(ProtocolError):
        decoder.feed(good)
    with pytest.raises(ProtocolError):
        decoder.get_buffer(-1)
    with pytest.raises(ProtocolError):
        decoder.buffer_updated(0)


def test_unallocatable_length_is_a_protocol_error():
    decoder = FrameDecoder(max_frame_bytes=1 << 62, max_header_bytes=1 << 62)
    with pytest.raises(ProtocolError, match="allocate"):
        decoder.feed(_prefix(1, 1 << 61) + b"x")


def test_buffer_updated_checks_the_count():
    decoder = FrameDecoder()
    view = decoder.get_buffer(-1)
    with pytest.raises(ValueError):
        decoder.buffer_updated(len(view) + 1)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_garbage_only_raises_protocol_error(garbage):
    decoder = FrameDecoder()
    try:
        decoder.feed(garbage)
        drain(decoder)
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    nbufs=st.integers(0, 2**32 - 1),
    lengths=st.lists(st.integers(0, 2**64 - 1), max_size=6),
    tail=st.binary(max_size=300),
)
def test_hostile_prefix_only_raises_protocol_error(nbufs, lengths, tail):
    decoder = FrameDecoder(max_buffers=64, max_frame_bytes=1 << 24, max_header_bytes=1 << 20)
    data = _prefix(nbufs, *lengths) + tail
    try:
        for i in range(0, len(data), 7):
            decoder.feed(data[i : i + 7])
        drain(decoder)
    except ProtocolError:
        pass


# -- purity ----------------------------------------------------------------------------

ALLOWED_IMPORTS = {
    "__future__",
    "collections",
    "hashlib",
    "hmac",
    "operator",
    "os",
    "pickle",
    "secrets",
    "struct",
    "typing",
    "dataclasses",
    "enum",
    "time",  # a clock, not I/O: a call's deadline is dated when its header is decoded
}


def test_wire_package_imports_no_io():
    package = pathlib.Path(wire.__file__).parent
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    continue
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in ALLOWED_IMPORTS, f"{path.name} imports {name}"


# -- attachments -----------------------------------------------------------------------

@SETTINGS
@given(shapes=frame_shapes, seed=st.integers(0, 2**32), data=st.data())
def test_attachments_roundtrip_in_place_under_any_chunking(shapes, seed, data):
    frames = make_frames(shapes, seed)
    marks = []
    stream = b""
    for frame in frames:
        small = [i for i in range(1, len(frame)) if len(frame[i]) <= MAX_ATTACHMENT_BYTES]
        chosen = data.draw(st.lists(st.sampled_from(small), unique=True) if small else st.just([]))
        marks.append(set(chosen))
        stream += b"".join(encode_frame(frame, sorted(chosen)))
    decoder = FrameDecoder(attachments=True)
    pos = 0
    while pos < len(stream):
        step = data.draw(st.integers(1, 70_000))
        decoder.feed(stream[pos : pos + step])
        pos += step
    out = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame)
    assert len(out) == len(frames)
    for got, want, marked in zip(out, frames, marks):
        for i, (buf, raw) in enumerate(zip(got, want)):
            if i in marked:
                assert isinstance(buf, wire.Attachment)
                assert bytes(buf.descriptor) == raw
            else:
                assert not isinstance(buf, wire.Attachment)
                assert bytes(buf) == raw


def test_attachment_refused_by_a_decoder_that_cannot_take_one():
    stream = b"".join(encode_frame([b"head", b"descriptor"], [1]))
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError, match="limit"):  # to it, just an impossible length
        decoder.feed(stream)


def test_malformed_attachments_are_protocol_errors():
    with pytest.raises(ValueError):
        encode_frame([b"head", b"x"], [0])  # the header cannot be one
    with pytest.raises(ValueError):
        encode_frame([b"head", b"x" * 65], [1])  # too long to be a descriptor
    header = struct.pack("!2sBxI", b"RG", PROTOCOL_VERSION, 2)
    for lengths in ((4 | wire.ATTACHMENT, 1), (4, 65 | wire.ATTACHMENT)):
        stream = header + struct.pack("!2Q", *lengths) + b"\0" * 69
        with pytest.raises(ProtocolError):
            FrameDecoder(attachments=True).feed(stream)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=300))
def test_a_header_and_a_pickle_encode_as_any_two_buffers_do(head, body):
    """Two ``bytes`` (most messages) take a short path: the same bytes as the general one."""
    parts = encode_frame([head, body])
    assert parts[1] is head and parts[2] is body
    general = encode_frame([bytearray(head), memoryview(body)])
    assert b"".join(parts) == b"".join(bytes(p) for p in general)
    decoder = FrameDecoder()
    decoder.feed(b"".join(parts))
    assert [bytes(b) for b in decoder.next_frame()] == [head, body]


@pytest.mark.parametrize("limits", [{"max_buffers": 1}, {"max_header_bytes": 2},
                                    {"max_frame_bytes": 5}])
def test_the_two_buffer_short_path_keeps_every_limit(limits):
    decoder = FrameDecoder(**limits)
    with pytest.raises(ProtocolError):
        decoder.feed(b"".join(encode_frame([b"head", b"body"])))
