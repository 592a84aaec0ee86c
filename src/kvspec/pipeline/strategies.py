"""Pipeline-parallel greedy decoding strategies, one function per rank role.

Ranks 0..S-1 hold the target's stages (`Stage`); rank 0, the head, embeds, samples and
verifies. With speculation, rank S holds the speculative model. Cache invariant (as in
`kvspec.decoding.loop`): every stage caches the committed tokens except the last, which the
next pipeline run feeds first.

- `iterative`: one token per pipeline run (pipeline-parallel inference without speculation).
- `speculative`: the head asks rank S for up to k draft tokens, runs them through the
  pipeline with the last committed token, keeps the accepted prefix and the target's next
  token, and sends CROP down the pipeline (pipeline-parallel speculative inference, one
  speculative model, as the document's SpecInfer baseline).
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.decoding.loop import ended, truncate_at_eos
from kvspec.decoding.verify import verify_greedy
from kvspec.pipeline import comm
from kvspec.pipeline.comm import CROP, DRAFT, RUN, STOP, TAG_TOKENS, TOKENS, Message
from kvspec.pipeline.stage import Stage

STRATEGIES = ("iterative", "speculative", "pipeinfer")


@dataclass
class Trace:
    """What the head saw: tokens and when each emission happened (perf_counter seconds)."""

    tokens: list[int] = field(default_factory=list)
    start: float = 0.0
    emitted_at: list[float] = field(default_factory=list)  # one entry per token
    runs: int = 0  # pipeline runs after the prefill
    drafted: int = 0
    accepted: int = 0
    cancelled: int = 0  # PipeInfer: speculative runs cancelled in flight

    def emit(self, tokens: list[int]) -> None:
        now = time.perf_counter()
        self.tokens += tokens
        self.emitted_at += [now] * len(tokens)

    def metrics(self) -> dict[str, float | int | None]:
        """TTFT, mean inter-token latency and generation speed excluding the first token."""
        n = len(self.tokens)
        ttft = self.emitted_at[0] - self.start if n else None
        span = self.emitted_at[-1] - self.emitted_at[0] if n > 1 else 0.0
        return {
            "new_tokens": n,
            "ttft_s": ttft,
            "itl_s": span / (n - 1) if n > 1 else None,
            "tokens_per_s": (n - 1) / span if span > 0 else None,
            "pipeline_runs": self.runs,
            "accept_len": n / self.runs if self.runs else None,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "cancelled": self.cancelled,
        }


class Head:
    """Rank 0: the first stage plus embedding and output head, talking to stages 1..S-1."""

    def __init__(self, stage: Stage, n_stages: int) -> None:
        if not stage.head:
            raise ValueError("rank 0 needs the head stage")
        self.stage, self.n_stages = stage, n_stages

    def run(self, tokens: list[int]) -> torch.Tensor:
        """Feed `tokens` through every stage; next-token logits per token.  # (T, V)"""
        hidden = self.stage(self.stage.embed_tokens(tokens))
        if self.n_stages > 1:
            comm.send(Message(RUN, len(tokens), payload=hidden), 1)
            hidden = comm.recv(self.n_stages - 1, hidden.shape[-1], hidden.dtype).payload
        return self.stage.logits(hidden)

    def crop(self, length: int) -> None:
        self.stage.crop(length)
        if self.n_stages > 1:
            comm.send(Message(CROP, a=length), 1)

    def stop(self) -> None:
        if self.n_stages > 1:
            comm.send(Message(STOP), 1)


def stage_worker(stage: Stage, rank: int, n_stages: int, die_after: int | None = None) -> None:
    """Ranks 1..S-1: run RUN messages through the stage and pass them on (the last stage back
    to the head); apply and forward CROP; forward STOP and return. `die_after` (fault tests):
    SIGKILL this process when that many RUN messages have been handled."""
    hidden_size, dtype = stage_io(stage)
    last = rank == n_stages - 1
    runs = 0
    while True:
        msg = comm.recv(rank - 1, hidden_size, dtype)
        if msg.kind == RUN:
            runs += 1
            die_at(runs, die_after)
            out = stage(msg.payload)
            comm.send(Message(RUN, msg.n, payload=out), 0 if last else rank + 1)
            continue
        if msg.kind == CROP:
            stage.crop(msg.a)
        if not last:
            comm.send(msg, rank + 1)
        if msg.kind == STOP:
            return


def stage_io(stage: Stage) -> tuple[int, torch.dtype]:
    """The hidden size and dtype of the activations a stage receives."""
    return stage.layers[0].self_attn.o_proj.out_features, next(stage.parameters()).dtype


def die_at(runs: int, die_after: int | None) -> None:
    """Fault tests: SIGKILL this process when it has handled `die_after` runs."""
    if runs == die_after:
        os.kill(os.getpid(), signal.SIGKILL)


def iterative(head: Head, prompt: list[int], max_new_tokens: int, stops: Sequence[int]) -> Trace:
    """One token per pipeline run."""
    trace = Trace(start=time.perf_counter())
    if len(prompt) > 1:
        head.run(prompt[:-1])
    last = prompt[-1]
    while len(trace.tokens) < max_new_tokens and not ended(trace.tokens, stops):
        last = int(torch.argmax(head.run([last])[-1]))
        trace.runs += 1
        trace.emit([last])
    head.stop()
    return trace


def speculative(
    head: Head,
    prompt: list[int],
    max_new_tokens: int,
    stops: Sequence[int],
    k: int,
    spec_rank: int,
) -> Trace:
    """Draft on `spec_rank`, verify k + 1 tokens per pipeline run, crop every stage."""
    trace = Trace(start=time.perf_counter())
    if len(prompt) > 1:
        head.run(prompt[:-1])
    seq = list(prompt)
    while len(trace.tokens) < max_new_tokens and not ended(trace.tokens, stops):
        budget = min(k, max_new_tokens - len(trace.tokens) - 1)
        drafts = ask_drafts(seq, budget, spec_rank)[0] if budget > 0 else []
        n_acc, nxt = verify_greedy(head.run([seq[-1], *drafts]), drafts)
        head.crop(len(seq) + n_acc)
        emitted = truncate_at_eos([*drafts[:n_acc], nxt], stops)
        seq += emitted
        trace.runs += 1
        trace.drafted += len(drafts)
        trace.accepted += min(n_acc, len(emitted))
        trace.emit(emitted)
    comm.send(Message(STOP), spec_rank, tag=TAG_TOKENS)
    head.stop()
    trace.tokens = trace.tokens[:max_new_tokens]
    return trace


def spec_worker(drafter: DraftModelDrafter) -> None:
    """The speculative rank: answer each context from the head with up to `a` draft tokens and
    the drafter's top-1 probability at each (DRAFT; NaN unless the drafter reports them)."""
    while True:
        msg = comm.recv(0, 0, torch.long, tag=TAG_TOKENS)
        if msg.kind == STOP:
            return
        draft = drafter.propose(msg.payload.tolist(), msg.a) if msg.a > 0 else None
        tokens = draft.tokens if draft else []
        confidence = (draft.confidence if draft else None) or [math.nan] * len(tokens)
        reply = torch.tensor([tokens, confidence], dtype=torch.float64).reshape(2, len(tokens))
        comm.send(Message(DRAFT, len(tokens), payload=reply), 0, tag=TAG_TOKENS)


def ask_drafts(seq: list[int], budget: int, spec_rank: int) -> tuple[list[int], list[float]]:
    """Up to `budget` draft tokens after `seq` from the speculative rank, with confidences."""
    context = torch.tensor(seq, dtype=torch.long)
    comm.send(Message(TOKENS, len(seq), a=budget, payload=context), spec_rank, tag=TAG_TOKENS)
    reply = comm.recv(spec_rank, 0, torch.long, tag=TAG_TOKENS).payload  # (2, n)
    return [int(t) for t in reply[0]], reply[1].tolist()
