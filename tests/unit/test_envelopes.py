"""The typed message kinds and the header codec: every kind survives the trip, byte for byte.

Headers go through ``regency._wire._envelope`` (a compact tagged tuple under the typed
classes); system messages travel as pickled objects of their registered class.
"""

from __future__ import annotations

import dataclasses
import pickle
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regency._wire import (
    ProtocolError,
    decode_header,
    decode_inbound,
    encode_call,
    encode_header,
    encode_reply,
    system_header,
)
from regency._wire import _messages as m

SETTINGS = settings(max_examples=60, deadline=None)

names = st.text(min_size=0, max_size=24)
ports = st.none() | st.tuples(names, st.integers(0, 2**31))
casts = st.tuples(
    st.lists(names, max_size=3).map(tuple),
    st.integers(0, 1000),
    st.lists(st.integers(0, 64), max_size=3).map(tuple),
    st.lists(st.integers(0, 64), max_size=3).map(tuple),
)
budgets = st.just(0.0) | st.floats(min_value=1e-6, max_value=1e9)  # 0.0: no deadline
calls = st.builds(m.Call, names, names, ports, casts, names, st.integers(0, 64), budgets)
replies = st.builds(m.Reply, st.integers(0, 2**40), st.none() | st.integers(0, 2**20),
                    st.sampled_from([m.OK, m.ACTOR_ERROR, m.RAW_ERROR, m.SUPERVISION, m.EOS]))
systems = st.builds(m.System, st.sampled_from(sorted(m.SYSTEM_KINDS)))
headers = calls | replies | systems

# Plain picklable values for the fields of system messages (which are typed loosely where
# they carry objects of the layers above).
leaves = st.none() | st.booleans() | st.integers() | names | st.binary(max_size=32) | st.floats(
    allow_nan=False)
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3)
                      | st.tuples(inner, inner)
                      | st.dictionaries(names, inner, max_size=3), max_leaves=8)


def _system_messages(cls: type[m.SystemMessage]) -> st.SearchStrategy[Any]:
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    return st.builds(cls, *(values for _ in fields))


@SETTINGS
@given(header=headers)
def test_every_header_kind_round_trips(header: m.Header) -> None:
    data = encode_header(header)
    back = decode_header(data)
    assert type(back) is type(header)
    assert back == header
    assert decode_header(memoryview(data)) == header  # as the connection hands it over


@SETTINGS
@given(call=calls, reply=replies)
def test_the_round_trip_encoders_write_what_encode_header_writes(call: m.Call,
                                                                 reply: m.Reply) -> None:
    assert encode_call(call.mesh_uid, call.endpoint, call.port, call.cast, call.sender,
                       call.fanout, call.budget) == encode_header(call)
    assert encode_reply(reply.port_id, reply.rank, reply.status) == encode_header(reply)


@SETTINGS
@given(header=headers, payload=st.lists(st.binary(max_size=16), max_size=3))
def test_an_inbound_frame_carries_its_decoded_header_and_the_frame_itself(
        header: m.Header, payload: list[bytes]) -> None:
    frame = [memoryview(encode_header(header)), *map(memoryview, payload)]
    decoded, same = decode_inbound(frame)
    assert decoded == header
    assert same is frame


@pytest.mark.parametrize("kind", sorted(m.SYSTEM_KINDS))
@SETTINGS
@given(data=st.data())
def test_every_system_kind_round_trips_as_its_own_class(kind: str, data: st.DataObject) -> None:
    cls = m.SYSTEM_KINDS[kind]
    msg = data.draw(_system_messages(cls))
    back = pickle.loads(pickle.dumps(msg, 5))
    assert type(back) is cls
    assert back == msg
    assert kind == back.KIND
    assert decode_header(system_header(kind)) == m.System(kind)


def test_the_registry_holds_every_system_kind_once_with_slots() -> None:
    assert len(m.SYSTEM_KINDS) == len(set(m.SYSTEM_KINDS.values()))
    for kind, cls in m.SYSTEM_KINDS.items():
        assert kind == cls.KIND
        assert issubclass(cls, m.SystemMessage)
        assert "__dict__" not in dir(cls), f"{cls.__name__} has no __slots__"
        field_names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        assert "KIND" not in field_names


def test_a_kind_cannot_be_registered_twice() -> None:
    with pytest.raises(ValueError, match="registered twice"):

        @m.system_message("spawn_actor")
        @dataclasses.dataclass(slots=True)
        class Again(m.SystemMessage):
            x: int


def test_header_tags_index_the_header_classes() -> None:
    assert (m.Call, m.Reply, m.System) == m.HEADER_KINDS
    assert (m.CALL_TAG, m.REPLY_TAG, m.SYSTEM_TAG) == (0, 1, 2)
    for cls in m.HEADER_KINDS:
        assert "__dict__" not in dir(cls)


@pytest.mark.parametrize("data", [
    b"",
    b"not a pickle",
    pickle.dumps(("no tag",)),
    pickle.dumps((99, "unknown tag")),
    pickle.dumps((m.REPLY_TAG, 1)),  # too few fields
    pickle.dumps(42),
])
def test_a_malformed_header_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError, match="malformed message header"):
        decode_header(data)


def test_a_call_names_the_system_kind_it_carries() -> None:
    cast = (("procs",), 0, (2,), (1,))
    stop = m.Call("mesh", m.SYSTEM_ENDPOINT + m.StopActor.KIND, None, cast, "root", 4)
    assert stop.system_kind == "stop_actor"
    assert m.Call("mesh", "ping", None, cast, "root", 0).system_kind is None


def test_headers_compare_hash_and_print_by_their_fields() -> None:
    cast = (("hosts",), 0, (2,), (1,))
    a = m.Call("mesh", "step", ("unix:@c", 3), cast, "root", 0)
    b = m.Call("mesh", "step", ("unix:@c", 3), cast, "root", 0)
    assert a == b and hash(a) == hash(b)
    assert a != m.Call("mesh", "step", ("unix:@c", 4), cast, "root", 0)
    assert m.Reply(3, None, m.OK) != m.Reply(3, 0, m.OK)
    assert m.System("x") != m.Call("x", "", None, cast, "", 0)
    assert repr(m.Reply(3, None, m.OK)) == "Reply(port_id=3, rank=None, status=0)"


@pytest.mark.parametrize("fields_", [
    (m.CALL_TAG, "mesh", "step", None, ((), 0, (), ()), "root"),  # one field short
    (m.CALL_TAG, "mesh", "step", None, ((), 0, (), ()), "root", 0, "extra"),
    (m.REPLY_TAG, 1, None, 0, "extra"),
])
def test_a_header_with_the_wrong_number_of_fields_is_a_protocol_error(
        fields_: tuple[object, ...]) -> None:
    with pytest.raises(ProtocolError, match="malformed message header"):
        decode_inbound([memoryview(pickle.dumps(fields_))])


def test_a_call_without_a_deadline_travels_without_the_field() -> None:
    cast = (("x",), 0, (2,), (1,))
    plain = encode_header(m.Call("mesh", "step", None, cast, "root", 0))
    timed = encode_header(m.Call("mesh", "step", None, cast, "root", 0, 2.5))
    assert len(plain) < len(timed)
    assert decode_header(plain).budget == 0.0 and decode_header(plain).expires == 0.0


def test_a_deadline_counts_from_the_decoding_where_it_arrives() -> None:
    cast = (("x",), 0, (2,), (1,))
    before = time.monotonic()
    got = decode_header(encode_header(m.Call("mesh", "step", None, cast, "root", 0, 2.5)))
    assert got.budget == 2.5
    assert before + 2.5 <= got.expires <= time.monotonic() + 2.5
