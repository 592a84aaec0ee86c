"""PipeInfer (document 003): asynchronous, continuous speculation over a pipeline of processes.

Ranks as in `kvspec.pipeline.strategies`: rank 0, the head, holds stage 0 with the embedding
and output head and verifies; ranks 1..S-1 hold the other stages; rank S the speculative
model. The document's four parts, for greedy decoding:

- **Asynchronous speculation**: the target run for the newest accepted token starts at once;
  speculative runs enter the pipeline behind it while it works. Results return in launch order.
- **Continuous speculation**: whenever no result is waiting, the head asks the speculative rank
  for a micro-batch of up to `micro_batch` tokens continuing the newest speculation, cut where
  the drafter's top-1 probability falls below the confidence cutoff. The cutoff rises by
  `recovery` with every micro-batch launched, falls by `decay` when a speculation comes back
  empty while no result is waiting, and returns to its base when a speculative run is accepted
  whole.
- **KV-cache multibuffering** (`kvspec.pipeline.cells`): a speculative run writes into a private
  sequence partition and sees the canonical sequence plus the partitions of the in-flight runs
  it builds on; once verified, its accepted cells are copied to the canonical sequence and its
  partition freed. These transactions travel down the pipeline behind the runs, in order, so a
  speculative run never recomputes the token the canonical run feeds before it.
- **Early inference cancellation**: after each verification, in-flight speculative runs whose
  tokens disagree with the accepted ones are cancelled: CANCEL(run id) goes to every stage on
  its own tag; a stage that has not evaluated the run skips it and passes SKIP on, so message
  order holds (canonical runs are never cancelled).

`PipeInferOptions.continuous` and `.cancellation` switch the last two off (Figure 8's
ablations): one speculative run of `batch` tokens in flight at a time; invalid runs evaluated
by every stage and dropped at the head.

Speculations here form one chain (the document's trees of width one), so a run is never
superfluous, only invalid. Greedy output equals single-process greedy decoding (tested).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from kvspec.decoding.loop import ended
from kvspec.pipeline import comm
from kvspec.pipeline.cells import CANONICAL, MultiBuffer
from kvspec.pipeline.comm import CANCEL, COPY, REMOVE, RUN, SKIP, STOP, Message
from kvspec.pipeline.stage import Stage
from kvspec.pipeline.strategies import Trace, die_at, stage_io

DraftFn = Callable[[list[int], int], tuple[list[int], list[float]]]


@dataclass
class PipeInferOptions:
    """Continuous speculation's knobs (the document's micro-batches of 1-4 tokens)."""

    micro_batch: int = 4  # tokens per speculative run
    cutoff: float = 0.3  # base confidence cutoff on the drafter's top-1 probability
    recovery: float = 0.05  # added per speculative run launched
    decay: float = 0.05  # subtracted when a speculation comes back empty, no result waiting
    partitions: int = 8  # sequence partitions: speculative runs in flight at most
    # Figure 8's ablations: without continuous speculation one speculative run of `batch`
    # tokens is in flight at a time; without early cancellation an invalid run is evaluated
    # by every stage and dropped when it returns
    continuous: bool = True
    batch: int = 16
    cancellation: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.partitions <= 60:  # bits of an int64 sequence mask
            raise ValueError(f"partitions must lie in [1, 60], not {self.partitions}")
        if self.micro_batch < 1 or self.batch < 1:
            raise ValueError(f"micro_batch and batch must be >= 1, not {self.micro_batch} "
                             f"and {self.batch}")  # fmt: skip


@dataclass
class Run:
    """One target run: `tokens` at positions p0.., in sequence bit `seq`, seeing `visible`."""

    id: int
    p0: int
    tokens: list[int]
    seq: int
    visible: int
    base: int  # accepted length at launch: earlier positions were settled then
    assumed: list[int]  # the sequence this run conditions on, its own tokens included
    cancelled: bool = False

    @property
    def speculative(self) -> bool:
        return self.seq != CANONICAL


def consistent(run: Run, accepted: Sequence[int]) -> bool:
    """Whether everything `run` assumed agrees with the tokens accepted so far."""
    stop = min(len(accepted), len(run.assumed))
    return all(run.assumed[i] == accepted[i] for i in range(run.base, stop))


def advance(
    accepted: list[int], run: Run, logits: torch.Tensor, limit: int, stops: Sequence[int]
) -> tuple[list[int], int]:
    """Greedy verification of a returned run (logits (n, V)): append the target's tokens it
    settles to `accepted`; return them and how many of the run's tokens were accepted."""
    new: list[int] = []
    ok = 0
    for i, token in enumerate(run.tokens):
        pos = run.p0 + i
        if pos >= len(accepted) or accepted[pos] != token:
            break
        ok = i + 1
        if pos + 1 == len(accepted) < limit:
            nxt = int(torch.argmax(logits[i]))
            accepted.append(nxt)
            new.append(nxt)
            if nxt in stops:
                break
    return new, ok


@dataclass
class Cutoff:
    """The confidence cutoff of continuous speculation with its recovery and decay."""

    base: float
    recovery: float
    decay: float
    value: float = field(init=False)

    def __post_init__(self) -> None:
        self.value = self.base

    def launched(self) -> None:
        self.value += self.recovery

    def failed(self) -> None:
        self.value = max(0.0, self.value - self.decay)

    def reset(self) -> None:
        self.value = self.base


class HeadPipeline:
    """The head's side of the pipeline: stage 0 evaluated here, the rest over messages.

    With one stage everything runs here and a result is 'waiting' once `depth` runs are queued
    (a deferred pipeline of that depth, used to test the scheduling in one process)."""

    def __init__(self, stage: Stage, n_stages: int, depth: int = 1) -> None:
        self.stage, self.n_stages, self.depth = stage, n_stages, depth
        self.buffer = MultiBuffer(stage)
        self.local: deque[tuple[int, torch.Tensor]] = deque()
        self.cancelled: set[int] = set()
        self.listener = None
        if n_stages > 1:
            dtype = next(stage.parameters()).dtype
            self.listener = comm.Listener(
                n_stages - 1,
                stage.embed.embedding_dim,
                dtype,
                comm.TAG_ACTIVATIONS,
                lambda m: m.kind == STOP,
            )

    def launch(self, run: Run) -> None:
        hidden = self.buffer.run(self.stage.embed_tokens(run.tokens), run.p0, run.seq, run.visible)
        if self.listener is None:
            self.local.append((run.id, hidden))
            return
        msg = Message(RUN, len(run.tokens), run.id, run.seq, run.p0, run.visible, hidden)
        comm.send(msg, 1)

    def transact(self, msg: Message) -> None:
        """A cache transaction: here now, down the pipeline behind the runs sent before it."""
        self.buffer.apply(msg)
        if self.listener is not None:
            comm.send(msg, 1)

    def cancel(self, run_id: int) -> None:
        if self.listener is None:
            self.cancelled.add(run_id)
        for rank in range(1, self.n_stages):
            comm.send(Message(CANCEL, a=run_id), rank, tag=comm.TAG_CANCEL)

    def ready(self) -> bool:
        if self.listener is None:
            return len(self.local) >= self.depth
        return self.listener.ready()

    def receive(self) -> tuple[int, torch.Tensor | None]:
        """The oldest run's id and final hidden states (None: the run was skipped)."""
        if self.listener is None:
            run_id, hidden = self.local.popleft()
            return run_id, None if run_id in self.cancelled else hidden
        msg = self.listener.get()
        assert msg is not None
        return msg.a, (msg.payload if msg.kind == RUN else None)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.stage.logits(hidden)

    def close(self) -> None:
        if self.listener is None:
            return
        for rank in range(1, self.n_stages):
            comm.send(Message(CANCEL, a=-1), rank, tag=comm.TAG_CANCEL)
        comm.send(Message(STOP), 1)
        self.listener.join()


class Scheduler:
    """The head's loop: launch, speculate while idle, verify, cancel, copy cache cells."""

    def __init__(
        self,
        pipe: HeadPipeline,
        draft: DraftFn,
        prompt: list[int],
        max_new_tokens: int,
        stops: Sequence[int],
        opts: PipeInferOptions,
    ) -> None:
        self.pipe, self.draft, self.stops, self.opts = pipe, draft, list(stops), opts
        self.accepted = list(prompt)
        self.prompt_len, self.limit = len(prompt), len(prompt) + max_new_tokens
        self.inflight: deque[Run] = deque()
        self.free = deque(1 << i for i in range(1, opts.partitions + 1))
        self.cutoff = Cutoff(opts.cutoff, opts.recovery, opts.decay)
        self.ids = itertools.count()
        self.blocked = False  # a speculation came back empty: wait for a result first
        self.trace = Trace(start=time.perf_counter())

    def generate(self) -> Trace:
        self._launch(self.accepted, 0, CANONICAL, CANONICAL)  # the prompt
        while not self._done():
            if self.pipe.ready() or not self._can_speculate():
                self._process(self.inflight.popleft())
            else:
                self._speculate()
        self._drain()
        return self.trace

    def _done(self) -> bool:
        return len(self.accepted) >= self.limit or ended(self.trace.tokens, self.stops)

    def _launch(self, assumed: list[int], p0: int, seq: int, visible: int) -> None:
        run = Run(next(self.ids), p0, assumed[p0:], seq, visible, len(self.accepted), list(assumed))
        self.pipe.launch(run)
        self.inflight.append(run)
        self.trace.runs += p0 > 0  # the prompt's run is the prefill

    def _valid(self) -> list[Run]:
        return [r for r in self.inflight if not r.cancelled]

    def _frontier(self) -> list[int]:
        """The accepted tokens followed by every in-flight speculation."""
        valid = self._valid()
        last = valid[-1].assumed if valid else []
        return list(last) if len(last) > len(self.accepted) else list(self.accepted)

    def _can_speculate(self) -> bool:
        if not self.opts.continuous and any(r.speculative for r in self._valid()):
            return False  # one speculative run in flight at a time
        return not self.blocked and bool(self.free) and len(self._frontier()) < self.limit

    def _speculate(self) -> None:
        frontier = self._frontier()
        size = self.opts.micro_batch if self.opts.continuous else self.opts.batch
        budget = min(size, self.limit - len(frontier))
        tokens, confidence = self.draft(frontier, budget)
        keep = 0
        while keep < len(tokens) and confidence[keep] >= self.cutoff.value:
            keep += 1
        if keep == 0:
            self.cutoff.failed()
            self.blocked = True
            return
        visible = CANONICAL
        for r in self._valid():
            visible |= r.seq
        self._launch(frontier + tokens[:keep], len(frontier), self.free.popleft(), visible)
        self.cutoff.launched()
        self.trace.drafted += keep

    def _process(self, run: Run) -> None:
        run_id, hidden = self.pipe.receive()
        if run_id != run.id:
            raise RuntimeError(f"pipeline returned run {run_id}, expected run {run.id}")
        ok = 0
        if hidden is not None and not run.cancelled and consistent(run, self.accepted):
            logits = self.pipe.logits(hidden)
            new, ok = advance(self.accepted, run, logits, self.limit, self.stops)
            self.trace.emit(new)
        if run.speculative:
            self._retire(run, ok)
        self.blocked = False
        self._cancel_invalid()
        if not self._valid() and not self._done():
            self._launch(self.accepted, len(self.accepted) - 1, CANONICAL, CANONICAL)

    def _retire(self, run: Run, ok: int) -> None:
        """Swap a verified speculative run's accepted cells into the canonical sequence and
        free its partition."""
        self.trace.accepted += ok
        if ok == len(run.tokens):
            self.cutoff.reset()
        if ok:
            self.pipe.transact(Message(COPY, a=run.seq, b=CANONICAL, c=run.p0, d=run.p0 + ok))
        self.pipe.transact(Message(REMOVE, a=run.seq))
        self.free.append(run.seq)

    def _cancel_invalid(self) -> None:
        """Mark in-flight runs that disagree with the accepted tokens invalid (nothing builds
        on them again) and, with early cancellation, tell the stages to skip them."""
        for r in self.inflight:
            if r.speculative and not r.cancelled and not consistent(r, self.accepted):
                r.cancelled = True
                if self.opts.cancellation:
                    self.pipe.cancel(r.id)
                    self.trace.cancelled += 1

    def _drain(self) -> None:
        """Cancel what is still in flight, collect it, and close the pipeline."""
        for r in self.inflight:
            if r.speculative and not r.cancelled:
                r.cancelled = True
                self.pipe.cancel(r.id)
        while self.inflight:
            run = self.inflight.popleft()
            self.pipe.receive()
            if run.speculative:
                self._retire(run, 0)
        self.pipe.close()
        self.trace.tokens = self.trace.tokens[: self.limit - self.prompt_len]


def pipeinfer_worker(stage: Stage, rank: int, n_stages: int, die_after: int | None = None) -> None:
    """Ranks 1..S-1 under PipeInfer: evaluate RUN transactions on the multibuffered cache
    unless cancelled (then pass SKIP on), apply and forward cache transactions; the last stage
    returns results, and finally STOP, to the head. `die_after`: as `stage_worker`."""
    buffer = MultiBuffer(stage)
    hidden_size, dtype = stage_io(stage)
    last = rank == n_stages - 1
    nxt = 0 if last else rank + 1
    cancels = comm.Listener(0, 0, torch.long, comm.TAG_CANCEL, lambda m: m.a < 0)
    cancelled: set[int] = set()
    runs = 0
    while True:
        msg = comm.recv(rank - 1, hidden_size, dtype)
        if msg.kind == RUN:
            runs += 1
            die_at(runs, die_after)
            while (note := cancels.get(block=False)) is not None:
                cancelled.add(note.a)
            if msg.a in cancelled:
                comm.send(Message(SKIP, a=msg.a), nxt)
                continue
            out = buffer.run(msg.payload, msg.c, msg.b, msg.d)
            comm.send(Message(RUN, msg.n, msg.a, msg.b, msg.c, msg.d, out), nxt)
        elif msg.kind == SKIP:
            comm.send(msg, nxt)
        elif msg.kind in (COPY, REMOVE):
            buffer.apply(msg)
            if not last:
                comm.send(msg, nxt)
        elif msg.kind == STOP:
            cancels.join()  # ends at the head's final CANCEL(-1)
            comm.send(msg, nxt)
            return
