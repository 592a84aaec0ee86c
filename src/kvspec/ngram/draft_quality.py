"""How good a draft model is for its target: accepted length under greedy verification and the
cost of one forward relative to the target's, measured side by side in one process.

A draft pays off when it is accepted often and costs little: with accepted length L (tokens
per target forward, bonus token included), draft depth k, and per-forward times t_D(q), t_T(q)
for q tokens fed after a cached context, one speculative step costs about k·t_D(1) (one
forward per drafted token) + t_T(k+1) (verification) where plain decoding pays L·t_T(1), so

    predicted speedup ≈ L·t_T(1) / (k·t_D(1) + t_T(k+1)).

Times are medians of forwards interleaved model by model (a change in machine load hits
both alike), after a discarded warm-up; on a shared CPU only their ratios mean much.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tqdm import tqdm

from kvspec.decoding.cache import crop_to
from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.decoding.loop import speculative_generate
from kvspec.seeds import derive

Prompts = Sequence[tuple[str, list[int]]]


class _CachedModel:
    """A model holding a KV cache of `cache_len` seeded random tokens, timed feeding q more."""

    def __init__(self, model: torch.nn.Module, cache_len: int, seed: int) -> None:
        from transformers import DynamicCache

        self.model, self.cache_len = model.eval(), cache_len
        self.vocab = model.config.vocab_size
        self.generator = torch.Generator().manual_seed(derive(seed, "cache context"))
        self.cache = DynamicCache()
        self._forward(self._tokens(cache_len))

    def _tokens(self, n: int) -> torch.Tensor:
        return torch.randint(0, self.vocab, (1, n), generator=self.generator)  # (1, n)

    @torch.inference_mode()
    def _forward(self, ids: torch.Tensor) -> None:
        self.model(input_ids=ids.to(self.model.device), past_key_values=self.cache, use_cache=True)

    def time_feed(self, q: int) -> float:
        """Seconds of one forward of q new tokens; the cache is cropped back afterwards."""
        ids = self._tokens(q)
        t0 = time.perf_counter()
        self._forward(ids)
        seconds = time.perf_counter() - t0
        crop_to(self.cache, self.cache_len)
        return seconds


def step_costs(
    models: Mapping[str, torch.nn.Module],
    *,
    cache_len: int,
    feeds: Sequence[int],
    repeats: int,
    seed: int = 0,
) -> dict[str, dict[int, float]]:
    """model name -> q -> median milliseconds of one forward feeding q tokens after a
    `cache_len`-token cache, timed round-robin over models and q (one warm-up round)."""
    cached = {name: _CachedModel(m, cache_len, seed) for name, m in models.items()}
    times: dict[str, dict[int, list[float]]] = {n: {q: [] for q in feeds} for n in cached}
    for rep in tqdm(range(repeats + 1), desc="step costs", mininterval=10):
        for q in feeds:
            for name, cm in cached.items():
                seconds = cm.time_feed(q)
                if rep:  # round 0 is the warm-up
                    times[name][q].append(seconds)
    return {
        n: {q: 1e3 * statistics.median(ts) for q, ts in by_q.items()} for n, by_q in times.items()
    }


def acceptance(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    prompts: Prompts,
    *,
    k: int,
    max_new_tokens: int,
    stops: Sequence[int],
) -> dict[str, float]:
    """Greedy speculative decoding of every prompt with the draft: accepted length (tokens per
    target forward), acceptance rate of drafted tokens, and where the time went."""
    drafter = DraftModelDrafter(draft)
    sums = dict.fromkeys(("tokens", "steps", "drafted", "accepted"), 0)
    secs = dict.fromkeys(("seconds", "draft_seconds", "verify_seconds"), 0.0)
    for _, ids in tqdm(prompts, desc="acceptance", unit="prompt", mininterval=10):
        t0 = time.perf_counter()
        tokens, steps = speculative_generate(
            target, ids, drafter, max_new_tokens, k, eos_token_id=list(stops)
        )
        secs["seconds"] += time.perf_counter() - t0
        secs["draft_seconds"] += sum(s.draft_seconds for s in steps)
        secs["verify_seconds"] += sum(s.verify_seconds for s in steps)
        sums["tokens"] += len(tokens)
        sums["steps"] += len(steps)
        sums["drafted"] += sum(s.drafted for s in steps)
        sums["accepted"] += sum(s.accepted for s in steps)
    return {
        "prompts": len(prompts),
        **sums,
        "accept_len": sums["tokens"] / max(1, sums["steps"]),
        "acceptance": sums["accepted"] / max(1, sums["drafted"]),
        **secs,
    }


def predicted_speedup(accept_len: float, costs: Mapping[str, Mapping[int, float]], k: int) -> float:
    """L·t_T(1) / (k·t_D(1) + t_T(k+1)) from `step_costs` of "target" and "draft"."""
    t, d = costs["target"], costs["draft"]
    return accept_len * t[1] / (k * d[1] + t[k + 1])


def draft_quality(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    sets: Mapping[str, Prompts],
    *,
    k: int,
    max_new_tokens: int,
    stops: Sequence[int],
    cache_len: int,
    feeds: Sequence[int],
    repeats: int,
    seed: int = 0,
) -> dict[str, Any]:
    """Per prompt set the draft's acceptance and predicted speedup; per q the two models'
    forward times and their ratio (draft / target)."""
    qs = sorted({1, *feeds, k + 1})
    costs = step_costs(
        {"target": target, "draft": draft},
        cache_len=cache_len, feeds=qs, repeats=repeats, seed=seed,
    )  # fmt: skip
    results = {}
    for name, prompts in sets.items():
        acc = acceptance(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, stops=stops)
        results[name] = {**acc, "predicted_speedup": predicted_speedup(acc["accept_len"], costs, k)}
    cost_rows = {
        q: {"target_ms": costs["target"][q], "draft_ms": costs["draft"][q],
            "ratio": costs["draft"][q] / costs["target"][q]}
        for q in qs
    }  # fmt: skip
    return {"k": k, "cache_len": cache_len, "sets": results, "costs": cost_rows}
