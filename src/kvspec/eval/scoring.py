"""lm-eval's HF model with log-likelihoods computed only where they are read, and each
context computed once for all its continuations.

lm-eval's `HFLM` applies the output head and a log-softmax to every position of every padded
row, then keeps the continuation tokens. With a large vocabulary the head dominates: Gemma-3's
262,144-token head costs more than its 18 layers, and a 16-row batch of 100 tokens makes a
1.7 GB log-softmax tensor. `ContinuationLM` runs the model's forward once per batch with a
pre-hook on the output head that keeps only the hidden states of the continuation positions.

lm-eval also feeds a multiple-choice question's context once per answer (ARC-Easy: 4 rows,
PIQA: 2). `ContinuationLM` packs the requests that share a context into one row: the context,
then each continuation but its last token, at the positions it would have after the context,
with an attention mask (`kvspec.decoding.tree`'s, sliding windows included) under which each
continuation sees the context and its own tokens only, so every scored position sees what it
sees in lm-eval's own row. Inputs otherwise are lm-eval's (right padding, causal models only),
so the scores are the same up to float rounding; anything else goes to lm-eval's own
implementation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from lm_eval.models.huggingface import HFLM
from torch import nn
from tqdm.auto import tqdm

Request = tuple[tuple[str, str], list[int], list[int]]


def _head(model: nn.Module) -> nn.Module | None:
    """The output head of `model`, when it exposes one."""
    try:
        return model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None


Scored = list[tuple[torch.Tensor, torch.Tensor]]


def continuation_logprobs(model: nn.Module, rows: Sequence[tuple[list[int], int]]) -> Scored:
    """Log-probabilities [n, vocab] and their row maxima [n] (on the CPU) at the last `n`
    positions of each (input tokens, n) row; rows are right-padded with 0 as lm-eval does."""
    width = max(len(inp) for inp, _ in rows)
    batch = torch.zeros(len(rows), width, dtype=torch.long)
    for b, (inp, _) in enumerate(rows):
        batch[b, : len(inp)] = torch.tensor(inp, dtype=torch.long)
    reads = [list(range(len(inp) - n, len(inp))) for inp, n in rows]
    return _read(model, {"input_ids": batch}, [(b, r) for b, r in enumerate(reads)])


@dataclass(frozen=True)
class PackedRow:
    """One context and several continuations in one row (`pack`)."""

    tokens: list[int]
    positions: list[int]
    allowed: torch.Tensor  # (n, n) bool: slot i sees slot j
    reads: list[list[int]]  # per continuation: the slots whose outputs predict its tokens


def pack(context: list[int], continuations: Sequence[list[int]]) -> PackedRow:
    """The context, then each continuation but its last token at positions len(context) + j;
    each continuation's slots see the context and its own earlier slots."""
    c = len(context)
    tokens, positions, reads, spans = list(context), list(range(c)), [], []
    for cont in continuations:
        start = len(tokens)
        tokens += cont[:-1]
        positions += range(c, c + len(cont) - 1)
        spans.append((start, len(tokens)))
        reads.append([c - 1, *range(start, len(tokens))])
    allowed = torch.zeros(len(tokens), len(tokens), dtype=torch.bool)
    allowed[:c, :c] = torch.ones(c, c, dtype=torch.bool).tril()
    for start, end in spans:
        allowed[start:end, :c] = True
        allowed[start:end, start:end] = torch.ones(end - start, end - start).tril().bool()
    return PackedRow(tokens, positions, allowed, reads)


def packed_logprobs(model: nn.Module, rows: Sequence[PackedRow]) -> list[Scored]:
    """`continuation_logprobs` of packed rows: per row, per continuation, (log-probabilities,
    row maxima) of its tokens. Rows are right-padded; a padding slot sees only itself."""
    from kvspec.decoding.tree import model_mask, stack_masks

    width = max(len(r.tokens) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    pos = torch.zeros(len(rows), width, dtype=torch.long)
    dtype = next(model.parameters()).dtype
    config = getattr(model.config, "base_config", model.config)  # an MLA model's source decoder
    masks = []
    for b, row in enumerate(rows):
        n = len(row.tokens)
        ids[b, :n], pos[b, :n] = torch.tensor(row.tokens), torch.tensor(row.positions)
        allowed = torch.eye(width, dtype=torch.bool)
        allowed[:n, :n] = row.allowed
        masks.append(model_mask(config, allowed, pos[b].tolist(), pos[b].tolist(), dtype))
    mask = stack_masks(masks)
    reads = [(b, r) for b, row in enumerate(rows) for r in row.reads]
    scored = iter(_read(model, {"input_ids": ids, "position_ids": pos, "attention_mask": mask},
                        reads))  # fmt: skip
    return [[next(scored) for _ in row.reads] for row in rows]


def _read(model: nn.Module, inputs: dict[str, Any], reads: list[tuple[int, list[int]]]) -> Scored:
    """Run the model's own forward on `inputs` (so everything it does around the head, e.g. a
    final-logit soft-cap, still applies) with a pre-hook that hands the head only the hidden
    states of the (row, slots) in `reads`; their log-probabilities and row maxima (`amax`:
    a fifth of `argmax`'s time on a 49,152-word row; `_greedy` reads the greedy flag off it)."""
    device = next(model.parameters()).device
    inputs = {k: _to(v, device) for k, v in inputs.items()}
    shape = inputs["input_ids"].shape
    b_idx = torch.cat([torch.full((len(s),), b) for b, s in reads]).to(device)
    t_idx = torch.cat([torch.tensor(s) for _, s in reads]).to(device)

    def gather(_module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        if args[0].shape[:2] != shape:
            raise RuntimeError(f"output head got {tuple(args[0].shape)}, not every position")
        return (args[0][b_idx, t_idx], *args[1:])

    handle = _head(model).register_forward_pre_hook(gather)  # type: ignore[union-attr]
    try:
        logits = model(**inputs).logits.float()
    finally:
        handle.remove()
    logp = torch.log_softmax(logits, dim=-1).cpu()
    sizes = [len(s) for _, s in reads]
    return list(zip(logp.split(sizes), logp.amax(-1).split(sizes), strict=True))


def _greedy(logp: torch.Tensor, top: torch.Tensor, picked: torch.Tensor,
            cont: torch.Tensor) -> bool:  # fmt: skip
    """Whether every continuation token is its row's `argmax` (the first index holding the
    maximum), for finite scores: its score is the row's maximum and no earlier index has it."""
    if not bool((picked == top).all()):
        return False
    rows = zip(logp, cont.tolist(), top.tolist(), strict=True)
    return not any(bool((row[:token] == best).any()) for row, token, best in rows)


def _to(value: Any, device: Any) -> Any:
    if isinstance(value, dict):
        return {k: v.to(device) for k, v in value.items()}
    return value.to(device)


def _chunks(groups: list[list[int]], size: int) -> Iterator[list[list[int]]]:
    """Consecutive groups holding at most `size` requests together (at least one group), so a
    packed batch never holds more tokens than lm-eval's batch of `size` rows would."""
    chunk: list[list[int]] = []
    for group in groups:
        if chunk and sum(map(len, chunk)) + len(group) > size:
            yield chunk
            chunk = []
        chunk.append(group)
    if chunk:
        yield chunk


class ContinuationLM(HFLM):
    """`HFLM` whose log-likelihood requests score only the continuation positions, the
    requests that share a context in one packed row (`share_contexts`)."""

    share_contexts = True

    def _loglikelihood_tokens(
        self, requests: list[Request], disable_tqdm: bool = False, override_bs: int | None = None
    ) -> list[tuple[float, bool]]:
        size = override_bs or self.batch_size
        if self.backend != "causal" or not isinstance(size, int) or _head(self.model) is None:
            return super()._loglikelihood_tokens(requests, disable_tqdm, override_bs)
        rows = [self._row(r) for r in requests]  # checks every request first
        groups = self._groups(requests) if self.share_contexts else []
        grouped = {i for g in groups for i in g}
        single = [i for i in range(len(requests)) if i not in grouped]
        single.sort(key=lambda i: -len(rows[i][0]))
        groups.sort(key=lambda g: -sum(len(requests[i][2]) for i in g) - len(requests[g[0]][1]))
        results: list[Any] = [None] * len(requests)
        bar = tqdm(total=len(requests), disable=disable_tqdm, desc="loglikelihood requests")
        for start in range(0, len(single), size):
            chunk = single[start : start + size]
            with torch.no_grad():
                scored = continuation_logprobs(self.model, [rows[i] for i in chunk])
            self._record(requests, results, chunk, scored)
            bar.update(len(chunk))
        for chunk in _chunks(groups, size):
            packed = [pack(requests[g[0]][1], [requests[i][2] for i in g]) for g in chunk]
            with torch.no_grad():
                scored = packed_logprobs(self.model, packed)
            flat = [i for g in chunk for i in g]
            self._record(requests, results, flat, [s for row in scored for s in row])
            bar.update(len(flat))
        bar.close()
        return results

    def _groups(self, requests: list[Request]) -> list[list[int]]:
        """Requests (2 or more) with the same context, none of them truncated by lm-eval."""
        by_context: dict[tuple[int, ...], list[int]] = {}
        for i, (_, context, continuation) in enumerate(requests):
            if len(context) + len(continuation) <= self.max_length + 1:
                by_context.setdefault(tuple(context), []).append(i)
        return [g for g in by_context.values() if len(g) > 1]

    def _record(self, requests: list[Request], results: list[Any], chunk: list[int],
                scored: Scored) -> None:  # fmt: skip
        for i, (logp, top) in zip(chunk, scored, strict=True):
            cont = torch.tensor(requests[i][2][-len(top) :], dtype=torch.long)
            picked = logp.gather(1, cont[:, None]).squeeze(1)
            results[i] = (float(picked.sum()), _greedy(logp, top, picked, cont))
            if requests[i][0] is not None:
                self.cache_hook.add_partial("loglikelihood", requests[i][0], results[i])

    def _row(self, request: Request) -> tuple[list[int], int]:
        """lm-eval's causal input (context + continuation minus the last token, left-truncated
        to the model length) and the number of continuation tokens scored."""
        _, context, continuation = request
        if not context or not continuation or len(continuation) > self.max_length:
            raise ValueError("a log-likelihood request needs a context and a continuation "
                             f"of at most {self.max_length} tokens")  # fmt: skip
        inp = (context + continuation)[-(self.max_length + 1) :][:-1]
        return inp, len(continuation)
