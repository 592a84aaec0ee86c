"""The sampling distribution both models of speculative sampling use: temperature, then top-p.

Speculative sampling preserves whatever distribution the target is verified with, so the
draft and the target must be warped alike: the emitted tokens then follow the *warped* target,
exactly as plain top-p sampling would draw them. Classical sampling here draws from the same
`warp`, one token per forward pass.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch

HEAD = 256  # entries ranked by the first partial sort of a row (`_nucleus`); doubled as needed


def warp(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0) -> torch.Tensor:
    """softmax(logits / temperature) restricted to the smallest set of most likely tokens whose
    mass reaches `top_p` (ties broken by index), renormalised, in float64.  # (..., V)"""
    if temperature <= 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature > 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_p >= 1:
        return probs
    rows = probs.reshape(-1, probs.shape[-1])
    keep = torch.zeros(rows.shape, dtype=torch.bool, device=probs.device)
    for i, row in enumerate(rows):
        keep[i] = _nucleus(row, top_p)
    keep = keep.reshape(probs.shape)
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(-1, keepdim=True)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The top-p mask of one row (V,): exactly what sorting the whole row (descending, stable,
    so ties go by index) and keeping each token whose running mass before it is < `top_p`
    gives, computed on the row's largest entries only.

    The head is every entry >= the m-th largest (ties at the edge included), so it is the
    sorted row's first len(head) entries in the same order and with the same running mass
    (a sequential sum); every later token has at least the head's whole mass before it, so
    once that reaches `top_p` (with a margin for the subtraction's rounding) none is kept.
    Otherwise m doubles, up to the whole row. A full sort of SmolLM2's 49,152 float64
    probabilities takes ~4 ms, more than a drafted token's forward pass."""
    width = probs.shape[-1]
    m = min(HEAD, width)
    while True:
        floor = torch.topk(probs, m, sorted=False).values.min()
        head = torch.nonzero(probs >= floor).flatten()  # ascending index
        if len(head) < m:  # topk ranks NaN first, and NaN >= floor is false
            raise ValueError("top-p of probabilities that are not numbers (NaN logits?)")
        ranked, order = torch.sort(probs[head], descending=True, stable=True)
        mass = torch.cumsum(ranked, dim=0)
        if len(head) == width or float(mass[-1]) >= top_p + 1e-9:
            break
        m = width if 4 * m >= width else 2 * m
    keep = torch.zeros(width, dtype=torch.bool, device=probs.device)
    keep[head[order[mass - ranked < top_p]]] = True  # the top token always stays
    return keep


def draw(p: torch.Tensor, generator: torch.Generator | None = None) -> int:
    """One index of `p` (V,; non-negative weights, not necessarily normalised) drawn with
    probability p[i] / Σ p, by inverting p's running sum at one uniform: the same law as
    `torch.multinomial(p, 1)`, but 0.03 against 0.78 ms on SmolLM2's 49,152 entries
    (2026-12-06, AMD EPYC), a sampled token's largest cost beside the forward. An index whose
    weight is 0 is never drawn. Every sampler of the study draws through this."""
    total = torch.cumsum(p.double(), 0)  # (V,)
    mass = float(total[-1])
    if not (mass > 0 and math.isfinite(mass)) or float(p.min()) < 0:
        raise ValueError(f"draw: weights must be finite, non-negative and not all 0 (sum {mass})")
    u = torch.rand(1, generator=generator, dtype=torch.float64) * mass
    i = int(torch.searchsorted(total, u, right=True))  # the first index whose running sum > u
    return i if i < len(total) else int(torch.nonzero(p).max())  # u rounded up to the total


@torch.inference_mode()
def sample_generate(
    model: torch.nn.Module,
    prompt: Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    eos_token_id: Sequence[int] = (),
    seed: int = 0,
) -> tuple[list[int], float]:
    """Classical (autoregressive) sampling from `warp`, batch 1; (tokens, seconds)."""
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(seed)
    stops, new = set(eos_token_id), []
    start = time.perf_counter()
    ids = torch.tensor([list(prompt)], device=model.device)  # (1, P)
    cache = DynamicCache()
    while len(new) < max_new_tokens and not (new and new[-1] in stops):
        logits = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        probs = warp(logits.logits[0, -1].cpu(), temperature, top_p)
        new.append(draw(probs, gen))
        ids = torch.tensor([[new[-1]]], device=model.device)
    return new, time.perf_counter() - start


@torch.inference_mode()
def sample_rows(
    model: torch.nn.Module,
    prompt: Sequence[int],
    seeds: Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    eos_token_id: Sequence[int] = (),
) -> list[list[int]]:
    """Classical sampling of len(`seeds`) continuations of one prompt decoded as one batch:
    the prompt is prefilled once, every row draws from `warp` with its own generator
    (row i follows `sample_generate(..., seed=seeds[i])`), a row leaves the batch at a stop.
    One prompt, so the rows share their length and need no padding or mask."""
    from transformers import DynamicCache

    gens = [torch.Generator().manual_seed(s) for s in seeds]
    stops, new = set(eos_token_id), [[] for _ in seeds]
    cache = DynamicCache()
    out = model(input_ids=torch.tensor([list(prompt)], device=model.device),
                past_key_values=cache, use_cache=True, logits_to_keep=1)  # fmt: skip
    _select_rows(cache, torch.zeros(len(seeds), dtype=torch.long))
    logits, live = out.logits[:, -1].expand(len(seeds), -1), list(range(len(seeds)))
    while live:
        probs = warp(logits.cpu(), temperature, top_p)  # (live, V)
        for row, p in zip(live, probs, strict=True):
            new[row].append(draw(p, gens[row]))
        keep = [i for i, r in enumerate(live) if _running(new[r], stops, max_new_tokens)]
        if len(keep) < len(live):
            _select_rows(cache, torch.tensor(keep, dtype=torch.long))
            live = [live[i] for i in keep]
        if not live:
            break
        ids = torch.tensor([[new[r][-1]] for r in live], device=model.device)
        logits = model(input_ids=ids, past_key_values=cache, use_cache=True).logits[:, -1]
    return new


def _running(tokens: list[int], stops: set[int], max_new_tokens: int) -> bool:
    return len(tokens) < max_new_tokens and tokens[-1] not in stops


def _select_rows(cache: object, index: torch.Tensor) -> None:
    """Keep (or repeat) the batch rows `index` of every layer of a transformers cache."""
    for layer in cache.layers:  # type: ignore[attr-defined]
        layer.keys = layer.keys[index.to(layer.keys.device)]
        layer.values = layer.values[index.to(layer.values.device)]
