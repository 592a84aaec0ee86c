"""Continuous vs static batching (lecture section 4.1) over one real, left-padded KV cache.

Both schedulers share `Batch`: rows decoding together, one token per row per step, over a
DynamicCache whose rows are aligned on the right (left padding, masked). A request is
prefilled alone when admitted (its first token is its time to first token) and merged into
the batch. Static batching (request-level scheduling) admits up to `slots` waiting requests
and decodes until all of them are done, finished rows idling in their slots; continuous
batching (iteration-level) removes a row the step it finishes and fills free slots from the
queue before every step. Greedy decoding: every request's tokens are the same either way.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache


@dataclass
class Request:
    rid: int
    prompt: list[int]
    new_tokens: int
    arrival: float = 0.0  # seconds after the start of the run


@dataclass
class Row:
    request: Request
    tokens: list[int] = field(default_factory=list)
    position: int = 0  # position id of the next fed token
    first_token: float = 0.0

    @property
    def done(self) -> bool:
        return len(self.tokens) >= self.request.new_tokens


@dataclass
class Finished:
    rid: int
    tokens: list[int]
    arrival: float
    first_token: float
    finish: float


def _pad_left(t: torch.Tensor, n: int) -> torch.Tensor:
    """Prepend n zero positions on the sequence axis (-2) of a (B, H, T, D) tensor."""
    return F.pad(t, (0, 0, n, 0)) if n else t


class Batch:
    """Rows decoding together over one left-padded cache; mask (B, T) marks real positions."""

    def __init__(self, model: torch.nn.Module) -> None:
        types = getattr(model.config, "layer_types", None) or []
        if any(t != "full_attention" for t in types):
            raise ValueError(
                "the batching scheduler needs full attention in every layer (a sliding-window "
                f"cache cannot be left-padded); {model.config.model_type} has {set(types)}"
            )
        self.model = model
        self.rows: list[Row] = []
        self.cache: DynamicCache | None = None
        self.mask = torch.zeros(0, 0, dtype=torch.long)
        self.steps = 0
        self.row_steps = 0  # rows decoded, counting finished rows still in their slot
        # per step: the cache's width (positions per row, padding included) and each row's
        # (request id, real positions): what PagedAttention's example accounts for
        self.kv_trace: list[tuple[int, list[tuple[int, int]]]] = []

    def __len__(self) -> int:
        return len(self.rows)

    @torch.inference_mode()
    def admit(self, request: Request, clock: float) -> Row:
        """Prefill `request` alone, take its first token, merge its cache into the batch."""
        ids = torch.tensor([request.prompt], device=self.model.device)  # (1, P)
        cache = DynamicCache()
        out = self.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        row = Row(request, [int(out.logits[0, -1].argmax())], len(request.prompt), clock)
        self._merge(cache, len(request.prompt))
        self.rows.append(row)
        return row

    def _merge(self, cache: DynamicCache, length: int) -> None:
        mask = torch.ones(1, length, dtype=torch.long)
        if self.cache is None or not self.rows:
            self.cache, self.mask = cache, mask
            return
        width = self.mask.shape[1]
        grow, pad = max(0, length - width), max(0, width - length)
        for mine, new in zip(self.cache.layers, cache.layers, strict=True):
            mine.keys = torch.cat([_pad_left(mine.keys, grow), _pad_left(new.keys, pad)])
            mine.values = torch.cat([_pad_left(mine.values, grow), _pad_left(new.values, pad)])
        self.mask = torch.cat([F.pad(self.mask, (grow, 0)), F.pad(mask, (pad, 0))])

    @torch.inference_mode()
    def step(self) -> None:
        """One token for every row (finished rows too: their slot is busy until removed)."""
        last = torch.tensor([[r.tokens[-1]] for r in self.rows], device=self.model.device)
        positions = torch.tensor([[r.position] for r in self.rows], device=self.model.device)
        self.mask = F.pad(self.mask, (0, 1), value=1)  # (B, T+1): the fed tokens
        out = self.model(
            input_ids=last,
            attention_mask=self.mask.to(self.model.device),
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
        )
        for row, token in zip(self.rows, out.logits[:, -1].argmax(-1).tolist(), strict=True):
            row.position += 1
            if not row.done:
                row.tokens.append(int(token))
        self.steps += 1
        self.row_steps += len(self.rows)
        lengths = self.mask.sum(1).tolist()
        rows = [(r.request.rid, int(n)) for r, n in zip(self.rows, lengths, strict=True)]
        self.kv_trace.append((self.mask.shape[1], rows))

    def remove_done(self, clock: float) -> list[Finished]:
        """Drop finished rows from the batch (and padding no row needs any more)."""
        keep = [i for i, r in enumerate(self.rows) if not r.done]
        done = [Finished(r.request.rid, r.tokens, r.request.arrival, r.first_token, clock)
                for r in self.rows if r.done]  # fmt: skip
        if done:
            self._select(keep)
        return done

    def _select(self, keep: list[int]) -> None:
        self.rows = [self.rows[i] for i in keep]
        index = torch.tensor(keep, dtype=torch.long)
        self.mask = self.mask[index]
        used = torch.nonzero(self.mask.sum(0)).flatten()
        start = int(used[0]) if len(used) else self.mask.shape[1]
        self.mask = self.mask[:, start:]
        for layer in self.cache.layers if self.cache is not None else []:
            layer.keys = layer.keys[index.to(layer.keys.device), :, start:]
            layer.values = layer.values[index.to(layer.values.device), :, start:]


def _arrived(queue: list[Request], clock: float) -> list[Request]:
    return [r for r in queue if r.arrival <= clock]


def _wait_for(queue: list[Request], start: float) -> None:
    """Sleep until the next request arrives (nothing to decode meanwhile)."""
    delay = min(r.arrival for r in queue) - (time.perf_counter() - start)
    if delay > 0:
        time.sleep(delay)


def run(model: torch.nn.Module, requests: list[Request], slots: int, policy: str,
        batch: Batch | None = None) -> tuple[list[Finished], Batch]:  # fmt: skip
    """Serve `requests` with at most `slots` rows under `policy` ("static" or "continuous"),
    in `batch` (an empty one of `model`'s by default; e.g. a speculative `SpecBatch`)."""
    if policy not in ("static", "continuous"):
        raise ValueError(f"policy must be 'static' or 'continuous', not {policy!r}")
    queue = sorted(requests, key=lambda r: (r.arrival, r.rid))
    batch, finished = batch if batch is not None else Batch(model), []
    start = time.perf_counter()
    while queue or len(batch):
        if len(batch) and (policy == "continuous" or all(r.done for r in batch.rows)):
            finished += batch.remove_done(time.perf_counter() - start)
        if policy == "continuous" or not len(batch):  # static fills only an empty batch
            for request in _arrived(queue, time.perf_counter() - start)[: slots - len(batch)]:
                queue.remove(request)
                batch.admit(request, time.perf_counter() - start)
            if policy == "continuous":  # a request may be done at its prefill
                finished += batch.remove_done(time.perf_counter() - start)
        if not len(batch):
            if queue:
                _wait_for(queue, start)
        elif not all(r.done for r in batch.rows):
            batch.step()
    return sorted(finished, key=lambda f: f.rid), batch


def summary(finished: list[Finished], batch: Batch, seconds: float) -> dict[str, Any]:
    """Throughput and per-request latency (arrival to last token) of one run."""
    latency = sorted(f.finish - f.arrival for f in finished)
    tokens = sum(len(f.tokens) for f in finished)
    return {
        "requests": len(finished), "tokens": tokens, "seconds": seconds,
        "tok_s": tokens / seconds, "steps": batch.steps, "row_steps": batch.row_steps,
        "useful_share": (tokens - len(finished)) / max(1, batch.row_steps),
        "latency_mean_s": statistics.mean(latency), "latency_p50_s": statistics.median(latency),
        "latency_p90_s": latency[min(len(latency) - 1, int(0.9 * len(latency)))],
        "ttft_mean_s": statistics.mean(f.first_token - f.arrival for f in finished),
    }  # fmt: skip
