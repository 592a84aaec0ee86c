"""The client of client-server speculative decoding: it drafts, the server verifies.

`remote_generate` connects to a server (`kvspec.remote.server`), sends the prompt, then for
each step the draft (a chain: 4 bytes per token) and reads the server's verdict (accepted
tokens, and the target's features for feature drafters, which it hands to the drafter). If the
connection ends (the server dies, the link is cut at `disconnect_after` new tokens, or a reply
takes longer than `timeout_s`), the client finishes the response with its drafter alone when
`fallback` is set (the document's disconnection experiment), and raises `RemoteError` naming
the cause otherwise. A malformed reply always raises: its content is never used.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kvspec.remote import protocol as p
from kvspec.remote.link import PROFILES, ShapedSocket
from kvspec.spec.decode import _ended, _truncate_at_eos


class RemoteError(RuntimeError):
    """The server could not finish the generation and no fallback was allowed."""


@dataclass
class RemoteResult:
    tokens: list[int] = field(default_factory=list)
    verified: int = 0  # tokens the server verified (the rest were drafted alone)
    calls: int = 0  # DRAFT messages (calls to the target)
    accepted: int = 0  # drafted tokens the server accepted
    sent: list[int] = field(default_factory=list)  # bytes of each client message (frame)
    received: list[int] = field(default_factory=list)  # bytes of each server message
    link_seconds: float = 0.0  # emulated one-way time of the client's messages
    seconds: float = 0.0
    disconnected: str | None = None  # why the server stopped answering, if it did

    def metrics(self) -> dict[str, Any]:
        n = len(self.tokens)
        return {"new_tokens": n, "verified": self.verified, "calls": self.calls,
                "tokens_per_s": n / self.seconds if self.seconds else None,
                "accept_len": self.verified / self.calls if self.calls else None,
                "accepted": self.accepted, "bytes_sent": sum(self.sent),
                "bytes_received": sum(self.received), "first_reply_bytes": self.received[0]
                if self.received else None, "link_seconds": self.link_seconds,
                "disconnected": self.disconnected}  # fmt: skip


def remote_generate(address: tuple[str, int], prompt: list[int], drafter: Any,
                    max_new_tokens: int, k: int, *, kind: str = "independent",
                    profile: str = "none", seed: int = 0, stops: Sequence[int] = (),
                    timeout_s: float = 30.0, disconnect_after: int | None = None,
                    fallback: bool = True) -> RemoteResult:  # fmt: skip
    """Greedy client-server speculative decoding of up to `max_new_tokens` tokens."""
    out = RemoteResult()
    start = time.perf_counter()
    seq = list(prompt)
    link = None
    try:
        link = _connect(address, profile, seed, timeout_s)
        _hello(link, out, kind, k, prompt, drafter)
        while len(out.tokens) < max_new_tokens and not _ended(out.tokens, stops):
            if disconnect_after is not None and len(out.tokens) >= disconnect_after:
                raise ConnectionAbortedError(f"link cut after {len(out.tokens)} new tokens")
            budget = min(k, max_new_tokens - len(out.tokens) - 1)
            drafts = drafter.propose(seq, budget).tokens[:budget] if budget > 0 else []
            accepted = _step(link, out, drafts, drafter, len(seq) - 1)
            emitted = _truncate_at_eos(accepted, stops)
            seq += emitted
            out.tokens += emitted
            out.verified = len(out.tokens)
        _bye(link)
    except (OSError, ConnectionError) as err:  # socket.timeout is an OSError
        out.disconnected = f"{type(err).__name__}: {err}"
        if not fallback:
            raise RemoteError(f"the server stopped answering after {len(out.tokens)} new "
                              f"tokens ({out.disconnected})") from err  # fmt: skip
        _alone(out, seq, drafter, max_new_tokens, stops)
    finally:
        if link is not None:
            out.link_seconds = link.stats.seconds
            link.close()
    out.tokens = out.tokens[:max_new_tokens]
    out.seconds = time.perf_counter() - start
    return out


def _connect(address: tuple[str, int], profile: str, seed: int, timeout_s: float) -> ShapedSocket:
    sock = socket.create_connection(address, timeout=timeout_s)
    sock.settimeout(timeout_s)
    return ShapedSocket(sock, PROFILES[profile], seed)


def _send(link: ShapedSocket, out: RemoteResult, kind: int, payload: bytes) -> None:
    frame = p.pack(kind, len(out.sent), payload)
    link.sendall(frame)
    out.sent.append(len(frame))


def _reply(link: ShapedSocket, out: RemoteResult) -> tuple[list[int], Any]:
    frame = p.read_frame(link.sock)
    out.received.append(frame.wire_bytes)
    if frame.kind == p.ERROR:
        raise p.ProtocolError(f"server error: {frame.payload.decode(errors='replace')}")
    if frame.kind != p.VERDICT:
        raise p.ProtocolError(f"expected VERDICT, got {p.KINDS[frame.kind]}")
    return p.decode_verdict(frame.payload)


def _hello(link: ShapedSocket, out: RemoteResult, kind: str, k: int, prompt: list[int],
           drafter: Any) -> None:  # fmt: skip
    _send(link, out, p.HELLO, p.encode_hello({"drafter": kind, "k": k}, prompt))
    _, feats = _reply(link, out)
    if feats is not None and hasattr(drafter, "observe"):
        drafter.observe(torch.from_numpy(feats), 0)


def _step(link: ShapedSocket, out: RemoteResult, drafts: list[int], drafter: Any,
          last: int) -> list[int]:  # fmt: skip
    _send(link, out, p.DRAFT, p.encode_draft(drafts, p.chain_parents(len(drafts))))
    accepted, feats = _reply(link, out)
    if (
        len(accepted) < 1
        or len(accepted) > len(drafts) + 1
        or accepted[:-1] != drafts[: len(accepted) - 1]
    ):
        raise p.ProtocolError(f"the verdict {accepted} does not extend the draft {drafts}")
    out.calls += 1
    out.accepted += len(accepted) - 1
    if feats is not None and hasattr(drafter, "observe"):
        drafter.observe(torch.from_numpy(feats), last)
    return accepted


def _bye(link: ShapedSocket) -> None:
    link.sendall(p.pack(p.BYE, 0, b""))


def _alone(out: RemoteResult, seq: list[int], drafter: Any, max_new_tokens: int,
           stops: Sequence[int]) -> None:  # fmt: skip
    """Finish with the drafter's own greedy tokens (drafters that need no server)."""
    if hasattr(drafter, "observe"):
        raise RemoteError(f"{type(drafter).__name__} needs the server's activations: it cannot "
                          f"finish alone ({out.disconnected})")  # fmt: skip
    while len(out.tokens) < max_new_tokens and not _ended(out.tokens, stops):
        token = drafter.propose(seq, 1).tokens[0]
        seq.append(token)
        out.tokens.append(token)
