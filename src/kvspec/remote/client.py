"""The client of client-server speculative decoding: it drafts, the server verifies.

`remote_generate` connects to a server (`kvspec.remote.server`), sends the prompt, then for
each step the draft — an EAGLE-2 tree when the drafter has `propose_tree`, else a chain; 4
bytes per node either way — and reads the server's verdict (the accepted path and the target's
next token) and the drafter's payload for the newly verified positions (`payload`), which it
hands to the drafter. If the connection ends (the server dies, the link is cut after
`disconnect_after` new tokens, or a reply takes longer than `timeout_s`), the client finishes
the response with its drafter alone when `fallback` is set (the document's disconnection
experiment: the drafter's own greedy continuation), and raises `RemoteError` naming the cause
otherwise. A malformed reply always raises: its content is never used.

The link is cut exactly after `disconnect_after` tokens: drafts are shortened so that no step
verifies past it (as they are shortened at `max_new_tokens`).
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvspec.decoding.loop import ended, truncate_at_eos
from kvspec.remote import protocol as p
from kvspec.remote.link import PROFILES, ShapedSocket
from kvspec.remote.payload import KINDS, client_receive
from kvspec.seeds import derive


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
    nodes: list[int] = field(default_factory=list)  # M of each DRAFT
    tokens_back: list[int] = field(default_factory=list)  # A of each VERDICT (first: 0)
    rows: list[list[int]] = field(default_factory=list)  # payload block rows of each VERDICT
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

    def messages(self) -> dict[str, list[Any]]:
        """Per message: the client's frame bytes and nodes, the server's bytes, A and rows."""
        return {"sent": self.sent, "nodes": self.nodes, "received": self.received,
                "tokens_back": self.tokens_back, "rows": self.rows}  # fmt: skip


def remote_generate(address: tuple[str, int], prompt: list[int], drafter: Any,
                    max_new_tokens: int, k: int, *, kind: str = "independent",
                    head: str | None = None, lossless: bool = False, profile: str = "none",
                    seed: int = 0, stops: Sequence[int] = (), timeout_s: float = 30.0,
                    disconnect_after: int | None = None,
                    fallback: bool = True) -> RemoteResult:  # fmt: skip
    """Greedy client-server speculative decoding of up to `max_new_tokens` tokens (`kind`:
    what the drafter reads from the server; `head`: a MoA head's name on the server)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    out = RemoteResult()
    start = time.perf_counter()
    seq = list(prompt)
    limit = min(max_new_tokens, disconnect_after if disconnect_after is not None else math.inf)
    link, synced = None, False
    try:
        link = _connect(address, profile, seed, timeout_s)
        settings = {"drafter": kind, "k": k, "head": head, "lossless": lossless,
                    "profile": profile, "seed": seed}  # fmt: skip
        _hello(link, out, settings, prompt, drafter, kind)
        synced = True
        while len(out.tokens) < max_new_tokens and not ended(out.tokens, stops):
            if len(out.tokens) >= limit:
                raise ConnectionAbortedError(f"link cut after {len(out.tokens)} new tokens")
            tokens, parents = _draft(drafter, seq, k, int(limit - len(out.tokens) - 1))
            accepted = _step(link, out, tokens, parents, drafter, kind, len(seq) - 1)
            emitted = truncate_at_eos(accepted, stops)
            seq += emitted
            out.tokens += emitted
            out.verified = len(out.tokens)
        _bye(link)
    except (OSError, ConnectionError) as err:  # socket.timeout is an OSError
        out.disconnected = f"{type(err).__name__}: {err}"
        if not fallback:
            raise RemoteError(f"the server stopped answering after {len(out.tokens)} new "
                              f"tokens ({out.disconnected})") from err  # fmt: skip
        _alone(out, seq, drafter, kind, synced, max_new_tokens, stops)
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
    return ShapedSocket(sock, PROFILES[profile], derive(seed, "client link"))


def _draft(drafter: Any, seq: list[int], k: int, budget: int) -> tuple[list[int], list[int]]:
    """(tokens, parent positions) of this step's draft: a tree of depth <= budget from a tree
    drafter, else a chain of <= min(k, budget) tokens."""
    if budget < 1:
        return [], []
    if hasattr(drafter, "propose_tree"):
        tree = drafter.propose_tree(seq, budget)
        if len(tree.tokens) >= p.ROOT:
            raise ValueError(f"a draft tree of {len(tree.tokens)} nodes does not fit the "
                             f"1-byte position field (at most {p.ROOT - 1})")  # fmt: skip
        return list(tree.tokens), [p.ROOT if q < 0 else q for q in tree.parents]
    tokens = drafter.propose(seq, min(k, budget)).tokens[: min(k, budget)]
    return list(tokens), p.chain_parents(len(tokens))


def _send(link: ShapedSocket, out: RemoteResult, kind: int, payload: bytes) -> None:
    frame = p.pack(kind, len(out.sent), payload)
    link.sendall(frame)
    out.sent.append(len(frame))


def _reply(link: ShapedSocket, out: RemoteResult) -> tuple[list[int], list[Any]]:
    frame = p.read_frame(link.sock)
    if frame.kind == p.ERROR:
        raise p.ProtocolError(f"server error: {frame.payload.decode(errors='replace')}")
    if frame.kind != p.VERDICT:
        raise p.ProtocolError(f"expected VERDICT, got {p.KINDS[frame.kind]}")
    tokens, blocks = p.decode_verdict(frame.payload)
    out.received.append(frame.wire_bytes)
    out.tokens_back.append(len(tokens))
    out.rows.append([len(b) for b in blocks])
    return tokens, blocks


def _hello(link: ShapedSocket, out: RemoteResult, settings: dict[str, Any], prompt: list[int],
           drafter: Any, kind: str) -> None:  # fmt: skip
    _send(link, out, p.HELLO, p.encode_hello(settings, prompt))
    out.nodes.append(0)
    _, blocks = _reply(link, out)
    if len(prompt) > 1:
        client_receive(kind, drafter, blocks, 0)


def _step(link: ShapedSocket, out: RemoteResult, tokens: list[int], parents: list[int],
          drafter: Any, kind: str, last: int) -> list[int]:  # fmt: skip
    _send(link, out, p.DRAFT, p.encode_draft(tokens, parents))
    out.nodes.append(len(tokens))
    accepted, blocks = _reply(link, out)
    if not accepted or not _is_path(accepted[:-1], tokens, parents):
        raise p.ProtocolError(f"the verdict {accepted} is no path of the draft {tokens}")
    out.calls += 1
    out.accepted += len(accepted) - 1
    client_receive(kind, drafter, blocks, last)
    return accepted


def _is_path(path: list[int], tokens: list[int], parents: list[int]) -> bool:
    """Is `path` the tokens of a root-down path of the draft?"""
    node = p.ROOT
    for token in path:
        child = next((i for i, (q, t) in enumerate(zip(parents, tokens, strict=True))
                      if q == node and t == token), None)  # fmt: skip
        if child is None:
            return False
        node = child
    return True


def _bye(link: ShapedSocket) -> None:
    link.sendall(p.pack(p.BYE, 0, b""))


def _alone(out: RemoteResult, seq: list[int], drafter: Any, kind: str, synced: bool,
           max_new_tokens: int, stops: Sequence[int]) -> None:  # fmt: skip
    """Finish with the drafter's own greedy continuation: one chain of every remaining token
    (a self-drafting drafter continues from what the server sent so far)."""
    if kind != "independent" and not synced:
        raise RemoteError(f"a {kind} drafter needs the server's first reply before it can "
                          f"draft alone ({out.disconnected})")  # fmt: skip
    remaining = max_new_tokens - len(out.tokens)
    if remaining < 1 or ended(out.tokens, stops):
        return
    draft = drafter.propose(seq, remaining).tokens[:remaining]
    emitted = truncate_at_eos(list(draft), stops)
    seq += emitted
    out.tokens += emitted
