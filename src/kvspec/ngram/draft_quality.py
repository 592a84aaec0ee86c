"""How good a draft model is for its target: accepted length under greedy verification and the
cost of one forward relative to the target's, measured side by side in one process.

A draft pays off when it is accepted often and costs little: with accepted length L (tokens
per target forward, bonus token included), draft depth k, and per-forward times t_D(q), t_T(q)
for q tokens fed after a cached context, one speculative step costs about k·t_D(1) (one
forward per drafted token) + t_T(k+1) (verification) where plain decoding pays L·t_T(1), so

    predicted speedup ≈ L·t_T(1) / (k·t_D(1) + t_T(k+1)).

A draft that ends below a confidence cut-off (`stop_below`) drafts d ≤ k tokens in a step; the
prediction then sums d·t_D(1) + t_T(d+1) over the steps it took.

Times are medians of forwards interleaved model by model (a change in machine load hits
both alike), after a discarded warm-up; on a shared CPU only their ratios mean much.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tqdm import tqdm

from kvspec.decoding.cache import crop_to
from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.decoding.lean import lean_forward, new_cache
from kvspec.decoding.loop import speculative_generate
from kvspec.seeds import derive

Prompts = Sequence[tuple[str, list[int]]]


class _CachedModel:
    """A model holding a KV cache of `cache_len` seeded random tokens, timed feeding q more;
    `drafts` through the forward its drafter calls (`kvspec.decoding.lean` where it applies)."""

    def __init__(self, model: torch.nn.Module, cache_len: int, seed: int, drafts: bool) -> None:
        self.model, self.cache_len = model.eval(), cache_len
        self.forward = lean_forward(self.model) if drafts else self.model
        self.vocab = model.config.vocab_size
        self.generator = torch.Generator().manual_seed(derive(seed, "cache context"))
        self.cache = new_cache(self.forward)
        self._forward(self._tokens(cache_len))

    def _tokens(self, n: int) -> torch.Tensor:
        return torch.randint(0, self.vocab, (1, n), generator=self.generator)  # (1, n)

    @torch.inference_mode()
    def _forward(self, ids: torch.Tensor) -> None:
        ids = ids.to(self.model.device)
        self.forward(input_ids=ids, past_key_values=self.cache, use_cache=True)

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
    drafts: Sequence[str] = ("draft",),
) -> dict[str, dict[int, float]]:
    """model name -> q -> median milliseconds of one forward feeding q tokens after a
    `cache_len`-token cache, timed round-robin over models and q (one warm-up round); the
    models named in `drafts` through the forward `DraftModelDrafter` calls."""
    cached = {name: _CachedModel(m, cache_len, seed, name in drafts) for name, m in models.items()}
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
    stop_below: float = 0.0,
) -> dict[str, Any]:
    """Greedy speculative decoding of every prompt with the draft: accepted length (tokens per
    target forward), acceptance rate of drafted tokens, how many steps drafted d tokens
    (`depths`), and where the time went."""
    drafter = DraftModelDrafter(draft, stop_below=stop_below)
    sums = dict.fromkeys(("tokens", "steps", "drafted", "accepted"), 0)
    depths: Counter[int] = Counter()
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
        depths.update(s.drafted for s in steps)
    return {
        "prompts": len(prompts),
        "cutoff": stop_below,
        **sums,
        "depths": {str(d): n for d, n in sorted(depths.items())},
        "accept_len": sums["tokens"] / max(1, sums["steps"]),
        "acceptance": sums["accepted"] / max(1, sums["drafted"]),
        **secs,
    }


def predicted_speedup(
    tokens: int, depths: Mapping[str, int], costs: Mapping[str, Mapping[int, float]]
) -> float:
    """tokens·t_T(1) / Σ over steps (d·t_D(1) + t_T(d+1)), d the tokens a step drafted
    (`depths`: d -> steps), from `step_costs` of "target" and "draft"."""
    t, dr = costs["target"], costs["draft"]
    spent = sum(n * (int(d) * dr[1] + t[int(d) + 1]) for d, n in depths.items())
    return tokens * t[1] / spent


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
    cutoffs: Sequence[float] = (0.0,),
    seed: int = 0,
) -> dict[str, Any]:
    """Per prompt set and confidence cut-off (`"0"`, `"0.5"`, ...) the draft's acceptance and
    predicted speedup; per q the two models' forward times and their ratio (draft / target);
    every verification width 1 ... k + 1 is timed."""
    qs = sorted({*feeds, *range(1, k + 2)})
    costs = step_costs(
        {"target": target, "draft": draft},
        cache_len=cache_len, feeds=qs, repeats=repeats, seed=seed,
    )  # fmt: skip
    results: dict[str, dict[str, Any]] = {}
    for name, prompts in sets.items():
        results[name] = {}
        for cut in cutoffs:
            acc = acceptance(target, draft, prompts, k=k, max_new_tokens=max_new_tokens,
                             stops=stops, stop_below=cut)  # fmt: skip
            speedup = predicted_speedup(acc["tokens"], acc["depths"], costs)
            results[name][f"{cut:g}"] = {**acc, "predicted_speedup": speedup}
    cost_rows = {
        q: {"target_ms": costs["target"][q], "draft_ms": costs["draft"][q],
            "ratio": costs["draft"][q] / costs["target"][q]}
        for q in qs
    }  # fmt: skip
    return {"k": k, "cache_len": cache_len, "sets": results, "costs": cost_rows}
