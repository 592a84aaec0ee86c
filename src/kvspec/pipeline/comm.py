"""Point-to-point messages between pipeline ranks (torch.distributed send/recv; gloo on CPU).

Every message is a fixed-size int64 header `[kind, n, a, b, c, d]` followed, for kinds that
carry one, by a payload whose shape the header fixes: RUN carries hidden states (1, n, H) of n
new tokens; TOKENS carries n token ids; DRAFT a (2, n) float64 block (token ids, the drafter's
top-1 probability at each step); SKIP, COPY, REMOVE, CANCEL, CROP and STOP carry none.
Messages between two ranks arrive in the order sent within one tag (one tag per message
class, as PipeInfer orders its transactions per sender and tag); CANCEL travels on a tag of
its own so that it can overtake the runs queued before it.

PipeInfer's fields (`kvspec.pipeline.pipeinfer`): RUN a = run id, b = the run's sequence bit,
c = position of its first token, d = bitmask of the sequences it may attend to; SKIP a = the
id of a cancelled run passed on without activations; COPY a = source bit, b = destination bit,
[c, d) = positions; REMOVE a = bit; CANCEL a = run id (-1: no more cancellations).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import torch
import torch.distributed as dist

RUN, TOKENS, CROP, STOP, SKIP, COPY, REMOVE, CANCEL, DRAFT = range(1, 10)
KINDS = {RUN: "RUN", TOKENS: "TOKENS", CROP: "CROP", STOP: "STOP", SKIP: "SKIP",
         COPY: "COPY", REMOVE: "REMOVE", CANCEL: "CANCEL", DRAFT: "DRAFT"}  # fmt: skip
HEADER = 6
TAG_ACTIVATIONS, TAG_TOKENS, TAG_CANCEL = 1, 2, 3  # pipeline / speculative rank / cancellation


@dataclass
class Message:
    kind: int
    n: int = 0
    a: int = 0
    b: int = 0
    c: int = 0
    d: int = 0
    payload: torch.Tensor | None = None


def send(msg: Message, dst: int, tag: int = TAG_ACTIVATIONS) -> None:
    """Send `msg` to rank `dst` (blocking until handed to the transport)."""
    head = [msg.kind, msg.n, msg.a, msg.b, msg.c, msg.d]
    dist.send(torch.tensor(head, dtype=torch.long), dst, tag=tag)
    if msg.payload is not None and msg.payload.numel():  # gloo: no empty transfers
        dist.send(msg.payload.contiguous(), dst, tag=tag)


def recv(src: int, hidden: int, dtype: torch.dtype, tag: int = TAG_ACTIVATIONS) -> Message:
    """The next message from rank `src`; RUN payloads are (1, n, hidden) of `dtype`."""
    head = torch.empty(HEADER, dtype=torch.long)
    dist.recv(head, src, tag=tag)
    kind, n, a, b, c, d = (int(x) for x in head)
    if kind not in KINDS:
        raise RuntimeError(f"rank {dist.get_rank()}: malformed message from rank {src}: {head}")
    payload = None
    if kind == RUN:
        payload = torch.empty(1, n, hidden, dtype=dtype)
    elif kind == TOKENS:
        payload = torch.empty(n, dtype=torch.long)
    elif kind == DRAFT:
        payload = torch.empty(2, n, dtype=torch.float64)
    if payload is not None and payload.numel():
        dist.recv(payload, src, tag=tag)
    return Message(kind, n, a, b, c, d, payload)


class Listener:
    """Receives messages from `src` on `tag` in a background thread, so that the caller can
    ask whether one is waiting without blocking (gloo's `irecv` reports completion only once
    waited on). The thread ends after a message for which `last(msg)` is true."""

    def __init__(self, src: int, hidden: int, dtype: torch.dtype, tag: int, last) -> None:
        self.inbox: queue.Queue[Message | BaseException] = queue.Queue()
        args = (src, hidden, dtype, tag, last)
        self.thread = threading.Thread(target=self._loop, args=args, daemon=True)
        self.thread.start()

    def _loop(self, src, hidden, dtype, tag, last) -> None:
        try:
            while True:
                msg = recv(src, hidden, dtype, tag)
                self.inbox.put(msg)
                if last(msg):
                    return
        except BaseException as err:  # a dead peer: hand the error to the caller
            self.inbox.put(err)

    def ready(self) -> bool:
        return not self.inbox.empty()

    def get(self, block: bool = True) -> Message | None:
        """The next message (None if `block` is false and none is waiting)."""
        try:
            item = self.inbox.get(block=block)
        except queue.Empty:
            return None
        if isinstance(item, BaseException):
            raise RuntimeError(f"rank {dist.get_rank()}: receiving failed: {item}") from item
        return item

    def join(self) -> None:
        self.thread.join()


def measure_link(rank: int, hidden: int, dtype: torch.dtype, feeds: tuple[int, ...] = (1, 16),
                 repeats: int = 20) -> dict[str, float] | None:  # fmt: skip
    """Ranks 0 and 1 bounce activations of each feed size; rank 0 returns the one-way time
    (half the median round trip) per size and the line latency + bytes / bandwidth through
    them (None on rank 1). Tag TAG_ACTIVATIONS, before any pipeline traffic."""
    import statistics
    import time

    one_way = {}
    for q in feeds:
        buf = torch.zeros(1, q, hidden, dtype=dtype)
        times = []
        for _ in range(repeats + 1):  # the first round trip is a warm-up
            start = time.perf_counter()
            if rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
            else:
                dist.recv(buf, 0)
                dist.send(buf, 0)
            times.append(time.perf_counter() - start)
        one_way[q * hidden * buf.element_size()] = statistics.median(times[1:]) / 2
    if rank != 0:
        return None
    sizes = sorted(one_way)
    slope = (one_way[sizes[-1]] - one_way[sizes[0]]) / (sizes[-1] - sizes[0])
    latency = max(one_way[sizes[0]] - slope * sizes[0], 0.0)
    return {"latency_s": latency, "bandwidth_bps": 1 / slope if slope > 0 else float("inf"),
            "one_way_s": {str(b): t for b, t in one_way.items()}}  # fmt: skip
