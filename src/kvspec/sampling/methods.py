"""Decoding methods of document 004, each one callable: prompt ids and a seed in, a sample out.

`classical` samples the target alone; `sd` is draft-model speculative sampling (exact);
`sd_printed` the same with the documents' printed resampling (from the target, not the
residual: `verify_resample_model`); `three_model` is Algorithm 2 as exact nested rejection
sampling. All draw from `warp(logits, temperature, top_p)`; "greedy" runs use top_p -> argmax.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.decoding.loop import greedy_generate, speculative_generate
from kvspec.decoding.verify import verify_resample_model
from kvspec.decoding.warp import sample_generate, sample_rows
from kvspec.sampling.three_model import SpeculativeDrafter
from kvspec.seeds import derive

KINDS = ("classical", "sd", "sd_printed", "three_model")


@dataclass
class Sample:
    tokens: list[int]
    seconds: float
    steps: int = 0  # target forward passes after the prompt (classical: one per token)
    drafted: int = 0
    accepted: int = 0  # drafts kept (prefix-accepted)
    passing: float = 0.0  # drafts that pass the test on their own (document 004's count)
    batch: int = 1  # samples decoded together; `seconds` is their wall time shared out evenly


Sampler = Callable[[Sequence[int], int], Sample]
BatchSampler = Callable[[Sequence[int], Sequence[int]], list[Sample]]


@dataclass(frozen=True)
class Settings:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    k: int = 3  # draft tokens per step (sd)
    stop_below: float = 0.0  # sd: end a draft after a token drawn with less probability
    k_d: int = 5  # three-model: draft tokens per intermediary cycle
    k_i: int = 3  # three-model: intermediary cycles per target verification
    greedy: bool = False
    stops: tuple[int, ...] = ()


def make_sampler(kind: str, models: Mapping[str, torch.nn.Module], s: Settings) -> Sampler:
    """`models`: target, and draft (sd, sd_printed) or draft + mid (three_model).

    The sampler's seed is the sample's own (`kvspec.seeds.derive(run_seed, ..., index)`); each
    random consumer inside a sample (the draft, the intermediary's inner verifier, the target's
    verifier, classical sampling) draws from its own stream derived from it."""
    if kind == "classical":
        return lambda prompt, seed: _classical(models["target"], prompt, seed, s)
    if kind in ("sd", "sd_printed"):
        verifier = verify_resample_model if kind == "sd_printed" else None
        return lambda prompt, seed: _speculative(
            models["target"], prompt, seed, s, s.k, verifier,
            DraftModelDrafter(models["draft"], sample=not s.greedy, temperature=s.temperature,
                              top_p=s.top_p, seed=derive(seed, "draft"),
                              stop_below=s.stop_below),
        )  # fmt: skip
    if kind == "three_model":

        def run(prompt: Sequence[int], seed: int) -> Sample:
            drafter = SpeculativeDrafter(
                models["mid"], models["draft"], s.k_d, s.k_i, temperature=s.temperature,
                top_p=s.top_p, seed=derive(seed, "three_model"), sample=not s.greedy,
            )  # fmt: skip
            return _speculative(models["target"], prompt, seed, s, drafter.depth, None, drafter)

        return run
    raise ValueError(f"unknown decoding method {kind!r}; known: {KINDS}")


def make_batch_sampler(kind: str, models: Mapping[str, torch.nn.Module],
                       s: Settings) -> BatchSampler | None:  # fmt: skip
    """Samples of one prompt for several sample seeds at once, or None for a method that
    decodes one sample at a time (speculative sampling and greedy runs). Classical sampling
    decodes them as one batch (`sample_rows`): each row draws from the stream `make_sampler`'s
    sample of its seed draws from, so on a batch-invariant engine (`resources.linear:
    packed`) every row is that sample token for token, in a fraction of the time."""
    if kind != "classical" or s.greedy:
        return None

    def run(prompt: Sequence[int], seeds: Sequence[int]) -> list[Sample]:
        start = time.perf_counter()
        rows = sample_rows(models["target"], prompt, [derive(x, "sample") for x in seeds],
                           s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                           eos_token_id=s.stops)  # fmt: skip
        share = (time.perf_counter() - start) / max(len(rows), 1)
        return [Sample(r, share, len(r), batch=len(rows)) for r in rows]

    return run


def _classical(model: torch.nn.Module, prompt: Sequence[int], seed: int, s: Settings) -> Sample:
    if s.greedy:
        start = time.perf_counter()
        tokens = greedy_generate(model, list(prompt), s.max_new_tokens, list(s.stops))
        return Sample(tokens, time.perf_counter() - start, len(tokens))
    tokens, seconds = sample_generate(model, prompt, s.max_new_tokens, temperature=s.temperature,
                                      top_p=s.top_p, eos_token_id=s.stops,
                                      seed=derive(seed, "sample"))  # fmt: skip
    return Sample(tokens, seconds, len(tokens))


def _speculative(target: torch.nn.Module, prompt: Sequence[int], seed: int, s: Settings, k: int,
                 verifier: Any, drafter: Any) -> Sample:  # fmt: skip
    start = time.perf_counter()
    tokens, steps = speculative_generate(
        target, list(prompt), drafter, s.max_new_tokens, k,
        mode="greedy" if s.greedy else "sample", temperature=s.temperature, top_p=s.top_p,
        eos_token_id=list(s.stops), seed=derive(seed, "verify"), verifier=verifier,
    )  # fmt: skip
    return Sample(tokens, time.perf_counter() - start, len(steps),
                  sum(x.drafted for x in steps), sum(x.accepted for x in steps),
                  sum(x.passing for x in steps))  # fmt: skip
