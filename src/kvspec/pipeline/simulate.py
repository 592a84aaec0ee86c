"""A discrete-event simulator of the three pipeline strategies (document 003), for node counts
this machine cannot hold.

Each node is its own CPU (the document's premise): node 0, the head, evaluates stage 0,
samples and verifies; nodes 1..N-1 evaluate their stages first-in first-out; the speculative
model answers the head on a node of its own. Costs come from a `Calibration` measured on our
models (`kvspec.pipeline.calibrate`); the link (latency, bandwidth) is a parameter. Draft
tokens are right independently with probability `alpha` (a geometric acceptance model), drawn
from a seeded generator. The head's logic mirrors `kvspec.pipeline.strategies` and
`kvspec.pipeline.pipeinfer` for greedy decoding, with two simplifications stated in every
result: PipeInfer speculates fixed micro-batches (no confidence cutoff: the model has no
confidences), and a cancelled run is skipped by a stage that has not started it when the
cancellation arrives (never mid-run).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kvspec.seeds import python_random


@dataclass(frozen=True)
class Calibration:
    """Seconds on one node: a decoder layer on q tokens costs layer[0] + layer[1]·q; the head's
    norm + output head + argmax on q rows head[0] + head[1]·q; the draft model proposing k
    tokens draft[0] + draft[1]·k. `layers` decoder layers, activations of `hidden` values of
    `bytes_per_value` bytes per token."""

    layer: tuple[float, float]
    head: tuple[float, float]
    draft: tuple[float, float]
    layers: int
    hidden: int
    bytes_per_value: int = 4

    def stage(self, n_layers: int, q: int) -> float:
        return n_layers * (self.layer[0] + self.layer[1] * q)

    def sample(self, q: int) -> float:
        return self.head[0] + self.head[1] * q

    def drafting(self, k: int) -> float:
        return self.draft[0] + self.draft[1] * k


@dataclass(frozen=True)
class Link:
    """One hop: latency (s) plus bytes / bandwidth (bytes per second)."""

    latency_s: float
    bandwidth_bps: float

    def time(self, n_bytes: float) -> float:
        return self.latency_s + n_bytes / self.bandwidth_bps


@dataclass(frozen=True)
class Setting:
    strategy: str  # iterative | speculative | pipeinfer
    nodes: int  # target nodes (pipeline stages)
    alpha: float  # probability that a draft token is the target's
    prompt: int = 128
    new_tokens: int = 128
    k: int = 4  # speculative: draft tokens per run
    micro_batch: int = 4  # pipeinfer
    partitions: int = 8  # pipeinfer: speculative runs in flight at most
    cancellation: bool = True  # pipeinfer ablation
    continuous: bool = True  # pipeinfer ablation: False = one speculative run in flight
    seed: int = 0


@dataclass
class _Run:
    q: int
    sent: float  # activations leave the head
    speculative: bool
    start: int = 0  # new-token index of the first token (speculative runs)
    right: list[bool] = field(default_factory=list)  # per token: is it the target's
    invalid: bool = False  # the head will discard it
    cancel_at: float | None = None  # when the head cancelled it
    back: float = 0.0  # result arrives at the head
    finish: list[float] = field(default_factory=list)  # per downstream stage


class Pipeline:
    """Nodes 1..N-1 as first-in first-out servers; timelines recomputed when runs change."""

    def __init__(self, cal: Calibration, link: Link, nodes: int) -> None:
        if not 1 <= nodes <= cal.layers:
            raise ValueError(f"cannot split {cal.layers} layers over {nodes} nodes")
        base, extra = divmod(cal.layers, nodes)
        self.sizes = [base + (s < extra) for s in range(nodes)]  # layers per node
        self.cal, self.link = cal, link
        self.free = [0.0] * nodes  # when each node finishes the runs already retired
        self.inflight: deque[_Run] = deque()

    def head_cost(self, q: int) -> float:
        return self.cal.stage(self.sizes[0], q)

    def send(self, run: _Run) -> None:
        self.inflight.append(run)
        self._timeline()

    def cancel(self, run: _Run, now: float) -> None:
        run.cancel_at = now
        self._timeline()

    def retire(self) -> _Run:
        run = self.inflight.popleft()
        for s, t in enumerate(run.finish, start=1):
            self.free[s] = t
        return run

    def _timeline(self) -> None:
        free = list(self.free)
        act = self.cal.hidden * self.cal.bytes_per_value
        for run in self.inflight:
            t, size = run.sent, run.q * act
            run.finish = []
            for s in range(1, len(self.sizes)):
                start = max(t + self.link.time(size), free[s])
                if run.cancel_at is not None and run.cancel_at + self.link.latency_s <= start:
                    size = 0  # skipped: empty activations keep the order
                busy = self.cal.stage(self.sizes[s], run.q) if size else 0.0
                free[s] = t = start + busy
                run.finish.append(t)
            run.back = t + (self.link.time(size) if len(self.sizes) > 1 else 0.0)


@dataclass
class Outcome:
    """What the head saw: emission times of the new tokens and its counters."""

    times: list[float] = field(default_factory=list)
    runs: int = 0
    drafted: int = 0
    accepted: int = 0
    cancelled: int = 0

    def emit(self, now: float, n: int) -> None:
        self.times += [now] * n

    def metrics(self) -> dict[str, Any]:
        n, t = len(self.times), self.times
        span = t[-1] - t[0] if n > 1 else 0.0
        return {"new_tokens": n, "ttft_s": t[0] if n else math.nan,
                "itl_s": span / (n - 1) if n > 1 else math.nan,
                "tokens_per_s": (n - 1) / span if span > 0 else math.nan,
                "runs": self.runs, "drafted": self.drafted, "accepted": self.accepted,
                "cancelled": self.cancelled}  # fmt: skip


def simulate(cal: Calibration, link: Link, setting: Setting) -> dict[str, Any]:
    """Generation of `setting.new_tokens` tokens after a prompt: TTFT (from the start of the
    prefill), ITL, tokens/s excluding the first token, and counters."""
    strategies = {"iterative": _iterative, "speculative": _speculative, "pipeinfer": _pipeinfer}
    if setting.strategy not in strategies:
        raise ValueError(f"strategy must be one of {sorted(strategies)}, not {setting.strategy!r}")
    if not 0.0 <= setting.alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], not {setting.alpha}")
    pipe = Pipeline(cal, link, setting.nodes)
    out = strategies[setting.strategy](pipe, setting, python_random(setting.seed, "strategy"))
    return {**out.metrics(), **vars(setting)}


def _through(pipe: Pipeline, now: float, q: int, speculative: bool = False) -> _Run:
    """Evaluate stage 0 on the head from `now` and send the run down the pipeline."""
    run = _Run(q, now + pipe.head_cost(q), speculative)
    pipe.send(run)
    return run


def _prefill(pipe: Pipeline, s: Setting) -> float:
    """The prompt minus its last token through the pipeline; when it is back."""
    now = _through(pipe, 0.0, s.prompt - 1).back
    pipe.retire()
    return now


def _iterative(pipe: Pipeline, s: Setting, rng: random.Random) -> Outcome:
    """Prefill the prompt minus its last token, then one token per pipeline pass."""
    out = Outcome()
    now = _prefill(pipe, s)
    while len(out.times) < s.new_tokens:
        run = _through(pipe, now, 1)
        now = run.back + pipe.cal.sample(1)
        pipe.retire()
        out.emit(now, 1)
        out.runs += 1
    return out


def _speculative(pipe: Pipeline, s: Setting, rng: random.Random) -> Outcome:
    """Prefill, then per run: k drafts, k + 1 tokens verified, accepted prefix + 1 emitted."""
    out = Outcome()
    now = _prefill(pipe, s)
    while len(out.times) < s.new_tokens:
        k = min(s.k, s.new_tokens - len(out.times) - 1)
        now += pipe.cal.drafting(k) if k else 0.0
        run = _through(pipe, now, k + 1)
        now = run.back + pipe.cal.sample(k + 1)
        pipe.retire()
        ok = _leading(rng, s.alpha, k)
        out.emit(now, ok + 1)
        out.runs, out.drafted, out.accepted = out.runs + 1, out.drafted + k, out.accepted + ok
    out.times = out.times[: s.new_tokens]
    return out


def _leading(rng: random.Random, alpha: float, k: int) -> int:
    """Draft tokens accepted before the first wrong one."""
    n = 0
    while n < k and rng.random() < alpha:
        n += 1
    return n


@dataclass
class _Head:
    """PipeInfer's head state in new-token indices: `settled` tokens emitted so far."""

    pipe: Pipeline
    s: Setting
    out: Outcome
    settled: int = 0
    attempts: dict[int, int] = field(default_factory=dict)  # token index -> times speculated

    def right(self, index: int) -> bool:
        """Whether the draft's guess for token `index` is the target's: one seeded draw per
        (index, attempt), so variants of the loop see the same drafts in the same order."""
        attempt = self.attempts.get(index, 0)
        self.attempts[index] = attempt + 1
        return python_random(self.s.seed, "accept", index, attempt).random() < self.s.alpha

    def valid(self) -> list[_Run]:
        return [r for r in self.pipe.inflight if not r.invalid]

    def frontier(self) -> int:
        """Index of the next token to speculate: after the last valid speculative run."""
        spec = [r for r in self.valid() if r.speculative]
        return spec[-1].start + spec[-1].q if spec else self.settled

    def invalidate(self, runs: list[_Run], now: float) -> None:
        for r in runs:
            r.invalid = True
            self.out.cancelled += 1
            if self.s.cancellation:
                self.pipe.cancel(r, now)  # otherwise evaluated in full, result discarded


def _pipeinfer(pipe: Pipeline, s: Setting, rng: random.Random) -> Outcome:
    """The head's loop of `kvspec.pipeline.pipeinfer.Scheduler` in time: verify a waiting
    result, else speculate a micro-batch while partitions are free, else wait."""
    head = _Head(pipe, s, Outcome())
    now = _through(pipe, 0.0, s.prompt).sent  # the whole prompt: its result is token 0
    limit = s.partitions if s.continuous else 1
    while head.settled < s.new_tokens:
        oldest = pipe.inflight[0]
        live = sum(r.speculative for r in head.valid())
        if oldest.back <= now or live >= limit or head.frontier() >= s.new_tokens:
            cost = 0.0 if oldest.invalid else pipe.cal.sample(oldest.q)  # discarded unread
            now = _verify(head, pipe.retire(), max(now, oldest.back) + cost)
            continue
        start = head.frontier()
        m = min(s.micro_batch, s.new_tokens - start)
        now += pipe.cal.drafting(m)
        run = _through(pipe, now, m, speculative=True)
        run.start, run.right = start, [head.right(start + i) for i in range(m)]
        now = run.sent
        head.out.runs, head.out.drafted = head.out.runs + 1, head.out.drafted + m
    head.out.times = head.out.times[: s.new_tokens]
    return head.out


def _verify(head: _Head, run: _Run, now: float) -> float:
    """Retire `run` at the head: emit what it settles, invalidate what a wrong token rules out,
    start a canonical run when nothing valid is left in flight; the head's time after."""
    if run.invalid:
        return now
    emitted, wrong = 1, False  # a canonical run settles one token
    if run.speculative:  # token 0 was checked by the run before; tokens 1.. by this one
        lead = next((i for i, r in enumerate(run.right[1:]) if not r), run.q - 1)
        emitted, wrong = 1 + lead, lead < run.q - 1
        head.out.accepted += emitted
    head.out.emit(now, emitted)
    head.settled += emitted
    later = head.valid()
    if later and (wrong or (later[0].speculative and not later[0].right[0])):
        head.invalidate(later, now)
    if not head.valid() and head.settled < head.s.new_tokens:
        head.out.runs += 1
        return _through(head.pipe, now, 1).sent  # the canonical run for the newest token
    return now
