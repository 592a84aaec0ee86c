"""The wire format: round trips, Table 7's sizes, and broken frames refused with a reason."""

from __future__ import annotations

import socket
import zlib

import numpy as np
import pytest

from kvspec.remote import protocol as p


def _through_socket(data: bytes) -> p.Frame:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(data)
        a.shutdown(socket.SHUT_WR)
        return p.read_frame(b)


def test_frames_round_trip_and_count_their_bytes() -> None:
    frame = _through_socket(p.pack(p.DRAFT, 7, p.encode_draft([5, 70000, 1], [p.ROOT, 0, 1])))
    assert (frame.kind, frame.seq) == (p.DRAFT, 7)
    assert p.decode_draft(frame.payload) == ([5, 70000, 1], [p.ROOT, 0, 1])
    assert frame.wire_bytes == p.HEADER.size + 12


def test_payload_sizes_follow_table_7() -> None:
    m, a, hidden = 6, 3, 64
    assert len(p.encode_draft(list(range(m)), [p.ROOT, *range(m - 1)])) == 4 * m
    tokens = [1, 2, 3]
    extra = 2 + 9  # our framing: token count, activation flag and shape
    independent = len(p.encode_verdict(tokens))
    eagle = len(p.encode_verdict(tokens, np.ones((a, hidden), dtype=np.float32)))
    t7 = p.table7_bytes("eagle", m=m, a=a, hidden=hidden)
    assert independent - extra == p.table7_bytes("independent", a=a)["server"] == 3 * a
    assert eagle - extra - 4 * a == t7["server"]  # + one float32 scale per row
    assert p.table7_bytes("ours", a=a, kv=16, tli=1)["server"] == 3 * a + 2 * a * 16 * 2


def test_quantised_activations_come_back_close_and_gzip_shrinks_them() -> None:
    rng = np.random.default_rng(0)
    acts = rng.normal(size=(40, 64)).astype(np.float32)
    tokens, back = p.decode_verdict(p.encode_verdict([9], acts))
    assert tokens == [9] and np.abs(back - acts).max() <= np.abs(acts).max() / 127
    smooth = np.tile(acts[:1], (40, 1))  # a repetitive prompt compresses
    assert len(p.encode_verdict([], smooth, compress=True)) < len(p.encode_verdict([], smooth)) / 4
    assert np.allclose(p.decode_verdict(p.encode_verdict([], smooth, compress=True))[1],
                       p.decode_verdict(p.encode_verdict([], smooth))[1])  # fmt: skip


def test_hello_round_trip() -> None:
    settings, prompt = p.decode_hello(p.encode_hello({"drafter": "eagle", "k": 4}, [1, 2, 3]))
    assert settings == {"drafter": "eagle", "k": 4} and prompt == [1, 2, 3]


@pytest.mark.parametrize(
    ("data", "message"),
    [(p.pack(p.BYE, 0, b"")[:10], "truncated header"),
     (p.pack(p.DRAFT, 0, b"\x00" * 8)[:-3], "truncated DRAFT payload"),
     (b"XXXX" + p.pack(p.BYE, 0, b"")[4:], "not a kvspec frame"),
     (p.HEADER.pack(p.MAGIC, 9, p.BYE, 0, 0, zlib.crc32(b"")), "protocol version 9"),
     (p.pack(p.DRAFT, 0, b"\x00" * 8)[:-1] + b"\x01", "fails its checksum")],
)  # fmt: skip
def test_broken_frames_are_refused(data, message) -> None:
    with pytest.raises(p.ProtocolError, match=message):
        _through_socket(data)


def test_a_closed_connection_is_not_a_frame() -> None:
    with pytest.raises(ConnectionError, match="closed the connection"):
        _through_socket(b"")


def test_bad_payloads_are_refused() -> None:
    with pytest.raises(p.ProtocolError, match="3 bytes"):
        p.encode_tokens([1 << 24])
    with pytest.raises(p.ProtocolError, match="earlier parent"):
        p.encode_draft([1, 2], [p.ROOT, 1])
