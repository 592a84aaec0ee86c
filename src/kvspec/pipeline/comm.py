"""Point-to-point messages between pipeline ranks (torch.distributed send/recv; gloo on CPU).

Every message is a fixed-size int64 header `[kind, n, a, b]` followed, for kinds that carry
one, by a payload whose shape the header fixes: RUN carries hidden states (1, n, H) of n new
tokens; TOKENS carries n token ids; CROP and STOP carry none. Messages between two ranks arrive
in the order sent (one tag per message class, as PipeInfer orders its transactions per sender
and tag).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

RUN, TOKENS, CROP, STOP = 1, 2, 3, 4
KINDS = {RUN: "RUN", TOKENS: "TOKENS", CROP: "CROP", STOP: "STOP"}
HEADER = 4
TAG_ACTIVATIONS, TAG_TOKENS = 1, 2  # pipeline traffic / head <-> speculative rank


@dataclass
class Message:
    kind: int
    n: int = 0
    a: int = 0
    b: int = 0
    payload: torch.Tensor | None = None


def send(msg: Message, dst: int, tag: int = TAG_ACTIVATIONS) -> None:
    """Send `msg` to rank `dst` (blocking until handed to the transport)."""
    dist.send(torch.tensor([msg.kind, msg.n, msg.a, msg.b], dtype=torch.long), dst, tag=tag)
    if msg.payload is not None:
        dist.send(msg.payload.contiguous(), dst, tag=tag)


def recv(src: int, hidden: int, dtype: torch.dtype, tag: int = TAG_ACTIVATIONS) -> Message:
    """The next message from rank `src`; RUN payloads are (1, n, hidden) of `dtype`."""
    head = torch.empty(HEADER, dtype=torch.long)
    dist.recv(head, src, tag=tag)
    kind, n, a, b = (int(x) for x in head)
    if kind not in KINDS:
        raise RuntimeError(f"rank {dist.get_rank()}: malformed message from rank {src}: {head}")
    payload = None
    if kind == RUN:
        payload = torch.empty(1, n, hidden, dtype=dtype)
    elif kind == TOKENS:
        payload = torch.empty(n, dtype=torch.long)
    if payload is not None:
        dist.recv(payload, src, tag=tag)
    return Message(kind, n, a, b, payload)
