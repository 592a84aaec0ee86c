"""The wire format of client-server speculative decoding, following the document's Table 7.

Every message is a frame: a fixed header (magic, protocol version, kind, sequence number,
payload length, CRC-32 of the payload) and the payload. Payloads:

- HELLO (client): JSON settings, then the prompt's token ids.
- DRAFT (client): per draft-tree node 3 bytes of token id and 1 byte of position (the index
  of its parent, 255 for the root): 4M bytes for M nodes.
- VERDICT (server): 3 bytes per accepted token (A of them: accepted drafts and the target's
  next token), then, for drafters that read the target's activations, an (R, D) block
  quantised to 8 bits (one byte per value plus a float32 scale per row) — gzip-compressed when
  the flag says so (the first message: the prompt's activations).
- BYE (client), ERROR (server: a UTF-8 reason).

A frame that is truncated, carries another magic or version, or fails its CRC raises
`ProtocolError` naming what was wrong; nothing from it is used.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

MAGIC, VERSION = b"KVSD", 1
HELLO, DRAFT, VERDICT, BYE, ERROR = 1, 2, 3, 4, 5
KINDS = {HELLO: "HELLO", DRAFT: "DRAFT", VERDICT: "VERDICT", BYE: "BYE", ERROR: "ERROR"}
HEADER = struct.Struct("!4sBBIII")  # magic, version, kind, seq, payload length, crc32
ROOT = 255  # position byte of a node whose parent is the last verified token
MAX_TOKEN = 1 << 24  # 3-byte token ids
MAX_PAYLOAD = 1 << 30


class ProtocolError(RuntimeError):
    """A malformed, truncated or unexpected message."""


@dataclass(frozen=True)
class Frame:
    kind: int
    seq: int
    payload: bytes

    @property
    def wire_bytes(self) -> int:
        return HEADER.size + len(self.payload)


def pack(kind: int, seq: int, payload: bytes) -> bytes:
    if kind not in KINDS:
        raise ProtocolError(f"unknown message kind {kind}")
    return HEADER.pack(MAGIC, VERSION, kind, seq, len(payload), zlib.crc32(payload)) + payload


def read_frame(sock: socket.socket) -> Frame:
    """The next frame from `sock` (its timeout applies); ProtocolError if it is broken,
    ConnectionError if the peer closed the connection before a frame began."""
    head = _read_exactly(sock, HEADER.size, "header", allow_eof=True)
    magic, version, kind, seq, length, crc = HEADER.unpack(head)
    if magic != MAGIC:
        raise ProtocolError(f"not a kvspec frame (magic {magic!r})")
    if version != VERSION:
        raise ProtocolError(f"protocol version {version}, this side speaks {VERSION}")
    if kind not in KINDS or length > MAX_PAYLOAD:
        raise ProtocolError(f"malformed header: kind {kind}, payload length {length}")
    payload = _read_exactly(sock, length, f"{KINDS[kind]} payload")
    if zlib.crc32(payload) != crc:
        raise ProtocolError(f"{KINDS[kind]} payload fails its checksum (corrupted)")
    return Frame(kind, seq, payload)


def _read_exactly(sock: socket.socket, n: int, what: str, allow_eof: bool = False) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            if got == 0 and allow_eof:
                raise ConnectionError("the peer closed the connection")
            raise ProtocolError(f"truncated {what}: got {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# ---- payloads ---------------------------------------------------------------------------------
def encode_tokens(ids: list[int]) -> bytes:
    if any(not 0 <= t < MAX_TOKEN for t in ids):
        raise ProtocolError("token ids must fit in 3 bytes")
    return b"".join(int(t).to_bytes(3, "big") for t in ids)


def decode_tokens(data: bytes) -> list[int]:
    if len(data) % 3:
        raise ProtocolError(f"token block of {len(data)} bytes is not a multiple of 3")
    return [int.from_bytes(data[i : i + 3], "big") for i in range(0, len(data), 3)]


def chain_parents(n: int) -> list[int]:
    """Parent positions of an n-token chain: the root, then each node's predecessor."""
    return [ROOT, *range(n - 1)][:n]


def encode_draft(tokens: list[int], parents: list[int]) -> bytes:
    """4 bytes per node: token id, then parent position (ROOT for the first level)."""
    if len(tokens) != len(parents) or any(not (p == ROOT or 0 <= p < i)
                                          for i, p in enumerate(parents)):  # fmt: skip
        raise ProtocolError("every draft node needs an earlier parent or the root")
    tok = encode_tokens(tokens)
    return b"".join(tok[3 * i : 3 * i + 3] + bytes([p]) for i, p in enumerate(parents))


def decode_draft(data: bytes) -> tuple[list[int], list[int]]:
    if len(data) % 4:
        raise ProtocolError(f"draft of {len(data)} bytes is not a multiple of 4")
    nodes = [data[i : i + 4] for i in range(0, len(data), 4)]
    return [int.from_bytes(n[:3], "big") for n in nodes], [n[3] for n in nodes]


def encode_hello(settings: dict[str, Any], prompt: list[int]) -> bytes:
    meta = json.dumps(settings, sort_keys=True).encode()
    return struct.pack("!I", len(meta)) + meta + encode_tokens(prompt)


def decode_hello(data: bytes) -> tuple[dict[str, Any], list[int]]:
    (n,) = struct.unpack_from("!I", data)
    return json.loads(data[4 : 4 + n]), decode_tokens(data[4 + n :])


def quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric 8-bit quantisation per row: int8 values and float32 scales."""
    x = np.asarray(x, dtype=np.float32)
    scale = np.abs(x).max(axis=1, keepdims=True) / 127.0
    scale[scale == 0] = 1.0
    return np.round(x / scale).astype(np.int8), scale[:, 0].astype(np.float32)


def dequantize(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return q.astype(np.float32) * scale[:, None]


def encode_verdict(
    tokens: list[int], acts: np.ndarray | None = None, compress: bool = False
) -> bytes:
    """Accepted tokens (3 bytes each), then the optional 8-bit activation block."""
    body = encode_tokens(tokens)
    head = struct.pack("!H", len(tokens))
    if acts is None:
        return head + body + struct.pack("!BII", 0, 0, 0)
    q, scale = quantize(acts)
    block = scale.tobytes() + q.tobytes()
    flag = 1 | (2 if compress else 0)
    if compress:
        block = gzip.compress(block, mtime=0)
    return head + body + struct.pack("!BII", flag, *q.shape) + block


def decode_verdict(data: bytes) -> tuple[list[int], np.ndarray | None]:
    (a,) = struct.unpack_from("!H", data)
    tokens = decode_tokens(data[2 : 2 + 3 * a])
    flag, rows, dim = struct.unpack_from("!BII", data, 2 + 3 * a)
    if not flag & 1:
        return tokens, None
    block = data[2 + 3 * a + 9 :]
    if flag & 2:
        block = gzip.decompress(block)
    if len(block) != rows * (4 + dim):
        raise ProtocolError(f"activation block of {len(block)} bytes for {rows} x {dim}")
    scale = np.frombuffer(block[: 4 * rows], dtype=np.float32)
    q = np.frombuffer(block[4 * rows :], dtype=np.int8).reshape(rows, dim)
    return tokens, dequantize(q, scale)


def table7_bytes(drafter: str, *, m: int = 0, a: int = 0, hidden: int = 0, kv: int = 0,
                 tli: int = 0) -> dict[str, int]:  # fmt: skip
    """The document's Table 7 (one byte per activation value after 8-bit quantisation):
    client 4M; server 3A + 2A·E_kv·(TLI+1) (ours), 3A + A·E (EAGLE), 3A (independent)."""
    server = {"ours": 3 * a + 2 * a * kv * (tli + 1), "eagle": 3 * a + a * hidden,
              "independent": 3 * a}[drafter]  # fmt: skip
    return {"client": 4 * m, "server": server}
