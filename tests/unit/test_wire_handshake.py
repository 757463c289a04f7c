"""Handshake: mutual authentication, version refusal, hostile input, any chunking."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regency._wire import (
    ClientHandshake,
    HandshakeError,
    ProtocolError,
    ServerHandshake,
    new_secret,
)
from regency._wire._handshake import AUTH_FAILED, HANDSHAKE, MAX_MESSAGE_BYTES

SECRET = b"s" * 32
VERSION = "0.1.0"
WIRE = f"{VERSION}+{HANDSHAKE}"  # what a side announces: the version and the revision


def pair(
    client_secret: bytes = SECRET,
    server_secret: bytes = SECRET,
    client_version: str = VERSION,
    server_version: str = VERSION,
    identity: str = "tcp://10.0.0.7:4321",
) -> tuple[ClientHandshake, ServerHandshake]:
    return (
        ClientHandshake(client_secret, client_version, identity),
        ServerHandshake(server_secret, server_version),
    )


def deliver(data: bytes, receiver: ClientHandshake | ServerHandshake, chunk: int | None) -> None:
    if chunk is None:
        receiver.receive_data(data)
        return
    for i in range(0, len(data), chunk):
        receiver.receive_data(data[i : i + chunk])


def pump(client: ClientHandshake, server: ServerHandshake, chunk: int | None = None) -> None:
    """Move bytes both ways until neither side has anything left to say."""
    for _ in range(10):
        to_server = client.data_to_send()
        to_client = server.data_to_send()
        if not to_server and not to_client:
            return
        deliver(to_server, server, chunk)
        deliver(to_client, client, chunk)
    raise AssertionError("handshake did not settle")


def header(kind: int, length: int) -> bytes:
    return struct.pack("!4sBH", b"RGHS", kind, length)


@pytest.mark.parametrize("chunk", [None, 1, 2, 3, 7, 64])
def test_successful_exchange(chunk):
    client, server = pair()
    assert not client.done and not server.done
    pump(client, server, chunk)
    for side in (client, server):
        assert side.done
        assert not side.failed
        assert side.error is None
        assert side.peer_version == WIRE
    assert server.peer_identity == "tcp://10.0.0.7:4321"
    assert client.peer_identity is None
    assert client.unused_data() == b""
    assert server.unused_data() == b""


def test_unicode_identity():
    client, server = pair(identity="unix:///tmp/régence-∂/sock")
    pump(client, server, 1)
    assert server.peer_identity == "unix:///tmp/régence-∂/sock"


def test_identity_is_hidden_until_authenticated():
    client, server = pair()
    server.receive_data(client.data_to_send())
    assert server.peer_identity is None
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    assert server.done
    assert server.peer_identity == "tcp://10.0.0.7:4321"


@pytest.mark.parametrize("chunk", [None, 1])
def test_wrong_secret_fails_both_sides(chunk):
    client, server = pair(client_secret=new_secret(), server_secret=new_secret())
    pump(client, server, chunk)
    for side in (client, server):
        assert side.failed
        assert not side.done
        assert isinstance(side.error, HandshakeError)
        assert isinstance(side.error, ProtocolError)
        assert str(side.error) == AUTH_FAILED
        assert "does not know the job secret" in str(side.error)
    assert server.peer_identity is None


def test_forged_proof_is_refused_by_the_server():
    client, server = pair()
    server.receive_data(client.data_to_send())
    server.data_to_send()
    server.receive_data(header(3, 32) + b"\0" * 32)
    assert server.failed
    assert str(server.error) == AUTH_FAILED
    assert server.peer_identity is None
    client.receive_data(server.data_to_send())
    assert client.failed
    assert str(client.error) == AUTH_FAILED


@pytest.mark.parametrize("chunk", [None, 1])
def test_version_mismatch_names_both_versions(chunk):
    client, server = pair(client_version="0.1.0", server_version="0.2.0")
    pump(client, server, chunk)
    assert server.failed and client.failed
    assert str(server.error) == ("version mismatch: peer speaks regency 0.1.0+hs2, this side "
                                 "0.2.0+hs2")
    assert str(client.error) == ("version mismatch: peer speaks regency 0.2.0+hs2, this side "
                                 "0.1.0+hs2")
    assert server.peer_version == "0.1.0+hs2"
    assert client.peer_version == "0.2.0+hs2"


@pytest.mark.parametrize(
    "garbage",
    [b"X", b"RGHX", b"RGX", b"GET / HTTP/1.1\r\n", b"\x16\x03\x01\x02\x00", b"\x00" * 100],
)
def test_garbage_fails_the_server_at_once(garbage):
    server = ServerHandshake(SECRET, VERSION)
    server.receive_data(garbage)
    assert server.failed
    assert "bad magic" in str(server.error)
    assert server.data_to_send().startswith(b"RGHS")  # a REJECT that says why


def test_garbage_fails_the_client_at_once():
    client = ClientHandshake(SECRET, VERSION, "me")
    client.data_to_send()
    client.receive_data(b"HTTP/1.1 400 Bad Request\r\n")
    assert client.failed
    assert "bad magic" in str(client.error)


def test_oversized_hello_fails_without_waiting_for_its_body():
    server = ServerHandshake(SECRET, VERSION)
    server.receive_data(header(1, 60_000))
    assert server.failed
    assert "limit" in str(server.error)


def test_truncated_prefix_of_a_valid_hello_waits():
    client, server = pair()
    hello = client.data_to_send()
    server.receive_data(hello[:-1])
    assert not server.failed and not server.done
    assert server.data_to_send() == b""


def test_unexpected_message_fails():
    server = ServerHandshake(SECRET, VERSION)
    server.receive_data(header(4, 0))  # OK before anything
    assert server.failed
    assert "unexpected" in str(server.error)


@pytest.mark.parametrize(
    "body",
    [b"", b"\x05abc", b"\x05" + b"0.1.0" + b"n" * 31, b"\x02" + b"\xff\xfe" + b"n" * 32],
)
def test_malformed_hello_fails(body):
    server = ServerHandshake(SECRET, VERSION)
    server.receive_data(header(1, len(body)) + body)
    assert server.failed
    assert "malformed" in str(server.error)


def test_identity_too_long_is_refused_locally():
    with pytest.raises(ValueError):
        ClientHandshake(SECRET, VERSION, "x" * MAX_MESSAGE_BYTES)
    with pytest.raises(ValueError):
        ServerHandshake(b"", VERSION)


def test_unused_data_after_ok_and_after_done():
    client, server = pair()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send() + b"early frame bytes")
    assert server.done
    assert server.unused_data() == b"early frame bytes"
    assert server.unused_data() == b""
    ok = server.data_to_send()
    for byte in ok + b"first frame":
        client.receive_data(bytes([byte]))
    assert client.done
    client.receive_data(b", second")
    assert client.unused_data() == b"first frame, second"


def test_failed_side_ignores_further_input():
    server = ServerHandshake(SECRET, VERSION)
    server.receive_data(b"junk")
    error = server.error
    server.receive_data(b"more junk")
    assert server.error is error
    assert server.unused_data() == b""


def test_nonces_and_secrets_are_fresh():
    assert len(new_secret()) == 32
    assert new_secret() != new_secret()
    first, second = pair(), pair()
    assert first[0].data_to_send() != second[0].data_to_send()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_chunking_of_the_exchange(data):
    client, server = pair()
    for _ in range(10):
        to_server = client.data_to_send()
        to_client = server.data_to_send()
        if not to_server and not to_client:
            break
        for payload, receiver in ((to_server, server), (to_client, client)):
            cuts = sorted(
                set(data.draw(st.lists(st.integers(0, len(payload)), max_size=10)))
            )
            previous = 0
            for cut in [*cuts, len(payload)]:
                receiver.receive_data(payload[previous:cut])
                previous = cut
    assert client.done and server.done
    assert server.peer_identity == "tcp://10.0.0.7:4321"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_authenticate(garbage):
    server = ServerHandshake(SECRET, VERSION)
    server.receive_data(garbage)
    assert not server.done
    client = ClientHandshake(SECRET, VERSION, "me")
    client.receive_data(garbage)
    assert not client.done


def test_a_valid_magic_prefix_waits_for_more():
    server = ServerHandshake(SECRET, VERSION)
    server.receive_data(b"RG")
    assert not server.failed


def test_protocol_failure_is_reported_to_the_peer():
    client, server = pair()
    server.receive_data(client.data_to_send())
    server.data_to_send()
    client.receive_data(b"nonsense")
    assert client.failed
    server.receive_data(client.data_to_send())
    assert server.failed
    assert "the peer rejected the handshake" in str(server.error)
    assert "bad magic" in str(server.error)


def challenge(body: bytes) -> bytes:
    return header(2, len(body)) + body


@pytest.mark.parametrize(
    ("message", "needle"),
    [
        (challenge(b"n" * 32 + b"\x05" + b"0.9.0"),
         "peer speaks regency 0.9.0, this side 0.1.0+hs2"),
        (challenge(b"n" * 32 + b"\x02" + b"\xff\xfe"), "not UTF-8"),
        (challenge(b"n" * 32 + b"\x09" + b"0.1.0"), "malformed"),
        (challenge(b"n" * 10), "malformed"),
        (challenge(b"n" * 32 + b"\x09" + b"0.1.0+hs2") + header(4, 32) + b"\0" * 32,
         AUTH_FAILED),
        (challenge(b"n" * 32 + b"\x09" + b"0.1.0+hs2") + header(4, 31) + b"\0" * 31,
         "malformed handshake OK"),
        (header(5, 1) + b"\x01", "malformed handshake REJECT"),
    ],
)
def test_bad_challenge_fails_the_client(message, needle):
    client = ClientHandshake(SECRET, VERSION, "me")
    client.data_to_send()
    client.receive_data(message)
    assert client.failed
    assert needle in str(client.error)


def test_client_side_version_refusal_reaches_the_server():
    client, server = pair()
    server.receive_data(client.data_to_send())
    client.receive_data(challenge(b"n" * 32 + b"\x05" + b"0.9.0"))
    server.receive_data(client.data_to_send())
    assert server.failed
    assert str(server.error) == f"version mismatch: peer speaks regency {WIRE}, this side {WIRE}"


def test_malformed_ok_fails_the_client():
    client, server = pair()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    client.data_to_send()
    client.receive_data(header(4, 1) + b"!")
    assert client.failed
    assert "malformed handshake OK" in str(client.error)


def _read_needed(stream: bytearray, side: ClientHandshake | ServerHandshake) -> None:
    """Feed ``side`` as a transport would that reads ``bytes_needed()`` at a time."""
    while not (side.done or side.failed):
        n = side.bytes_needed()
        assert 1 <= n <= len(stream), "asked for bytes past the end of the message"
        side.receive_data(bytes(stream[:n]))
        del stream[:n]


@given(trailer=st.binary(min_size=1, max_size=64), identity=st.text(max_size=40))
def test_reading_only_the_bytes_needed_never_takes_what_follows(trailer, identity):
    """Reading ``bytes_needed()`` at a time stops exactly where the last message ends, so
    bytes that follow the handshake (a first frame and the file descriptors sent with it)
    stay in the socket for the connection, on either side."""
    client, server = pair(identity=identity or "x")
    server.receive_data(client.data_to_send())  # HELLO
    client.receive_data(server.data_to_send())  # CHALLENGE
    stream = bytearray(client.data_to_send() + trailer)  # PROOF, then whatever follows
    _read_needed(stream, server)
    assert server.done and stream == trailer
    stream = bytearray(server.data_to_send() + trailer)  # OK, then the server's first frame
    _read_needed(stream, client)
    assert client.done and stream == trailer
    assert client.unused_data() == b"" and server.unused_data() == b""


# -- issue 19: nothing testable offline reaches a peer that has not proved itself ----------

def _hmac_candidates(key: bytes, data: bytes) -> set[bytes]:
    """Every HMAC-SHA256 under ``key`` of every contiguous slice of ``data`` (a superset of
    anything a server could have sent that an offline guess could be checked against)."""
    import hmac as _hmac

    out = set()
    for i in range(len(data)):
        for j in range(i, len(data) + 1):
            out.add(_hmac.digest(key, data[i:j], "sha256"))
    return out


def test_a_client_without_the_secret_receives_nothing_keyed_by_it():
    """What a server sends before the client's proof checks out is only the challenge: its
    nonce and version. The client gets no 32-byte value derived from the key (unlike the
    first revision, where the CHALLENGE carried the server's HMAC)."""
    server = ServerHandshake(SECRET, VERSION)
    attacker = ClientHandshake(b"a wrong guess", VERSION, "tcp://evil:1")
    received = bytearray()
    server.receive_data(attacker.data_to_send())
    out = server.data_to_send()
    received += out
    assert out[4] == 2  # CHALLENGE
    assert len(out) == 7 + 32 + 1 + len(WIRE)  # header, nonce, version: no MAC in it
    attacker.receive_data(out)
    server.receive_data(attacker.data_to_send())  # a wrong proof
    out = server.data_to_send()
    received += out
    assert server.failed and out[4] == 5  # REJECT: code, version, reason text
    assert out.endswith(AUTH_FAILED.encode())
    macs = _hmac_candidates(SECRET, bytes(received[:80]))
    for i in range(len(received) - 31):
        assert bytes(received[i : i + 32]) not in macs


def test_the_server_proves_itself_only_after_the_client_did():
    client, server = pair()
    server.receive_data(client.data_to_send())
    challenge_bytes = server.data_to_send()
    assert not server.done and challenge_bytes[4] == 2
    client.receive_data(challenge_bytes)
    assert not client.done  # it proved itself, and waits for the server's proof
    server.receive_data(client.data_to_send())
    assert server.done
    client.receive_data(server.data_to_send())
    assert client.done


def test_a_server_that_does_not_know_the_secret_fails_the_client():
    client, server = pair(server_secret=new_secret())
    pump(client, server)
    assert client.failed and server.failed
    assert str(client.error) == AUTH_FAILED


def test_an_earlier_revision_is_refused_as_a_version_mismatch():
    """A peer of the first revision announces its bare version: it is told, clearly."""
    server = ServerHandshake(SECRET, VERSION)
    body = bytes([len(VERSION)]) + VERSION.encode() + b"n" * 32 + b"me"
    server.receive_data(header(1, len(body)) + body)
    assert server.failed
    assert str(server.error) == f"version mismatch: peer speaks regency {VERSION}, this side {WIRE}"
