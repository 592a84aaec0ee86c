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
    m, a, hidden, kv, tli = 6, 3, 64, 16, 2
    assert len(p.encode_draft(list(range(m)), [p.ROOT, *range(m - 1)])) == 4 * m
    tokens = [1, 2, 3]
    independent = len(p.pack(p.VERDICT, 0, p.encode_verdict(tokens)))
    eagle = len(p.pack(p.VERDICT, 0, p.encode_verdict(tokens, [np.ones((a, hidden))])))
    ours_blocks = [np.ones((a, 2 * kv)), np.ones((a * tli, 2 * kv))]
    ours = len(p.pack(p.VERDICT, 0, p.encode_verdict(tokens, ours_blocks)))
    t7 = {d: p.table7_bytes(d, m=m, a=a, hidden=hidden, kv=kv, tli=tli)["server"]
          for d in ("independent", "eagle", "ours")}  # fmt: skip
    assert independent == t7["independent"] + p.verdict_overhead([]) and t7["independent"] == 9
    assert eagle == t7["eagle"] + p.verdict_overhead([a])
    assert ours == t7["ours"] + p.verdict_overhead([a, a * tli])
    assert t7["ours"] == 3 * a + 2 * a * kv * (tli + 1)


def test_quantised_activations_come_back_close_and_gzip_shrinks_them() -> None:
    rng = np.random.default_rng(0)
    acts = rng.normal(size=(40, 64)).astype(np.float32)
    tokens, (back,) = p.decode_verdict(p.encode_verdict([9], [acts]))
    assert tokens == [9] and np.abs(back - acts).max() <= np.abs(acts).max() / 127
    smooth = np.tile(acts[:1], (40, 1))  # a repetitive prompt compresses
    plain = p.encode_verdict([], [smooth])
    assert len(p.encode_verdict([], [smooth], compress=True)) < len(plain) / 4
    assert np.allclose(p.decode_verdict(p.encode_verdict([], [smooth], compress=True))[1][0],
                       p.decode_verdict(plain)[1][0])  # fmt: skip


def test_lossless_blocks_come_back_exactly() -> None:
    blocks = [np.random.default_rng(1).normal(size=(3, 5)), np.arange(8.0).reshape(4, 2)]
    tokens, back = p.decode_verdict(p.encode_verdict([1, 2], blocks, compress=True,
                                                     lossless=True))  # fmt: skip
    assert tokens == [1, 2] and all(np.array_equal(x, y) for x, y in zip(back, blocks, strict=True))


def test_an_inconsistent_verdict_is_refused() -> None:
    data = p.encode_verdict([1], [np.ones((2, 4))])
    with pytest.raises(p.ProtocolError, match="payload of"):
        p.decode_verdict(data[:-1])
    with pytest.raises(p.ProtocolError, match="malformed VERDICT"):
        p.decode_verdict(data[:5])


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
