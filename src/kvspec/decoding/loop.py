"""The speculative decoding loop shared by every drafter, and the plain greedy baseline.

Cache invariant in both loops: the target's KV cache holds every committed token except
the last one, which is fed at the start of the next forward pass. A speculative step
feeds that token plus the k drafts at once, reads k+1 next-token distributions, and crops
the cache back to the committed prefix after verification.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kvspec.decoding.cache import crop_to
from kvspec.decoding.drafts import Draft, Drafter, one_hot
from kvspec.decoding.features import FeatureTap
from kvspec.decoding.verify import q_vector, verify_greedy, verify_sampling
from kvspec.decoding.warp import warp


@dataclass
class Step:
    """One draft-and-verify round: how many tokens were drafted and accepted, and its cost."""

    drafted: int
    accepted: int
    draft_seconds: float
    verify_seconds: float
    cache_len: int  # target cache length after the step (= committed tokens - 1)
    # Σ over every drafted token of its chance to pass the test on its own, min(1, p/q) (greedy:
    # matches the argmax), rejected prefixes or not: document 004's "accepted" count
    passing: float = 0.0


@torch.inference_mode()
def speculative_generate(
    target: torch.nn.Module,
    input_ids: torch.Tensor | list[int],
    drafter: Drafter,
    max_new_tokens: int,
    k: int,
    mode: str = "greedy",
    temperature: float = 1.0,
    eos_token_id: int | Sequence[int] | None = None,
    seed: int = 0,
    top_p: float = 1.0,
    verifier: Callable[..., tuple[int, int]] | None = None,
    prefilled: Any = None,
) -> tuple[list[int], list[Step]]:
    """Generate up to `max_new_tokens` tokens with draft-then-verify; return (tokens, steps).

    `mode="greedy"` reproduces plain greedy decoding token for token; `mode="sample"`
    samples from `warp(logits, temperature, top_p)` exactly, via rejection sampling (the drafter
    must propose from the same warp for its own distribution; `verifier` replaces
    `verify_sampling`, e.g. by a deliberately inexact variant to measure it). Drafts are
    shortened so a step never overshoots the budget; generation stops after `eos_token_id`
    (one id or several, e.g. end-of-text and end-of-turn). `prefilled`: a cache already
    holding the prompt minus its last token (e.g. one long prefill shared by several runs); it
    is extended in place, and the caller crops it back.
    """
    if mode not in ("greedy", "sample"):
        raise ValueError(f"mode must be 'greedy' or 'sample', not {mode!r}")
    generator = torch.Generator().manual_seed(seed)
    prompt = as_prompt(input_ids)
    with session(target, prompt, drafter, prefilled) as (cache, tap, observe, watch):
        seq, new, steps = list(prompt), [], []
        while len(new) < max_new_tokens and not ended(new, eos_token_id):
            budget = min(k, max_new_tokens - len(new) - 1)
            t0 = time.perf_counter()
            draft = drafter.propose(seq, budget) if budget > 0 else None
            drafts = draft.tokens[:budget] if draft else []
            t1 = time.perf_counter()
            logits = forward_tokens(target, cache, [seq[-1], *drafts])  # (n_drafts+1, V)
            if mode == "greedy":
                n_acc, nxt = verify_greedy(logits, drafts)
                passing = _passing_greedy(logits, drafts)
            else:
                probs = warp(logits, temperature, top_p)
                q = _proposal(draft, drafts)
                n_acc, nxt = (verifier or verify_sampling)(probs, drafts, q, generator)
                passing = _passing(probs, drafts, q)
            crop_to(cache, len(seq) + n_acc)  # keep the old last token and the accepted drafts
            if observe is not None:  # features of the old last token and the accepted drafts
                observe(tap.last[: n_acc + 1], len(seq) - 1)
            if watch is not None:  # the cache holds exactly the verified positions now
                watch(cache)
            t2 = time.perf_counter()
            if hasattr(drafter, "feedback"):
                drafter.feedback(len(drafts), n_acc, t2 - t1)
            emitted = truncate_at_eos([*drafts[:n_acc], nxt], eos_token_id)
            seq += emitted
            new += emitted
            drafted, accepted = _counted(len(drafts), n_acc, len(emitted))
            passing = passing if drafted == len(drafts) else accepted  # drafts cut after an EOS
            steps.append(Step(drafted, accepted, t1 - t0, t2 - t1, cache.get_seq_length(), passing))
        return new[:max_new_tokens], steps


@contextlib.contextmanager
def session(
    target: torch.nn.Module, prompt: list[int], drafter: Any, prefilled: Any = None
) -> Iterator[tuple]:
    """The target's cache prefilled with the prompt (or `prefilled`, which must hold the prompt
    minus its last token), and for drafters that read the target's state what they need:
    (cache, feature tap, `observe`, `observe_cache`); the two hooks are None for drafters
    without them. Features and cache of the prompt are handed over here."""
    observe = getattr(drafter, "observe", None)  # feature drafters (kvspec.neural.eagle)
    watch = getattr(drafter, "observe_cache", None)  # K/V drafters (kvspec.neural.moa)
    if prefilled is not None:
        _check_prefilled(prefilled, prompt, observe)
    with feature_tap(target, observe is not None) as tap:
        cache = prefill(target, prompt) if prefilled is None else prefilled
        if observe is not None and len(prompt) > 1:
            observe(tap.last, 0)
        if watch is not None:
            watch(cache)
        yield cache, tap, observe, watch


def _check_prefilled(cache: Any, prompt: list[int], observe: Any) -> None:
    if cache.get_seq_length() != len(prompt) - 1:
        raise ValueError(
            f"the prefilled cache holds {cache.get_seq_length()} positions; the prompt minus its "
            f"last token is {len(prompt) - 1}"
        )
    if observe is not None:
        raise ValueError("a drafter that reads the target's features needs its own prefill")


def feature_tap(target: torch.nn.Module, wanted: bool) -> Any:
    """A FeatureTap on `target` when a drafter wants features, else a no-op context."""
    if not wanted:
        return contextlib.nullcontext()
    return FeatureTap(target)


def _passing(probs: torch.Tensor, drafts: list[int], q: Any) -> float:
    """Σ_i min(1, p_i(x_i) / q_i(x_i)) over the drafted tokens x_i."""
    total = 0.0
    for i, token in enumerate(drafts):
        q_x = float(q_vector(q, i, probs.shape[-1])[token])
        total += min(1.0, float(probs[i, token]) / q_x) if q_x > 0 else 0.0
    return total


def _passing_greedy(logits: torch.Tensor, drafts: list[int]) -> float:
    """How many drafted tokens equal the target's argmax at their own position."""
    choice = torch.argmax(logits[: len(drafts)], dim=-1).tolist()
    return float(sum(c == d for c, d in zip(choice, drafts, strict=True)))


def _counted(drafted: int, accepted: int, emitted: int) -> tuple[int, int]:
    """(drafted, accepted) of a step, not counting drafts after an emitted EOS.

    `emitted` tokens were kept: the accepted drafts and the target's token, cut after EOS.
    When EOS is an accepted draft, the drafts behind it were never used.
    """
    if emitted <= accepted:  # EOS among the accepted drafts, at index emitted - 1
        return emitted, emitted
    return drafted, accepted


@torch.inference_mode()
def greedy_generate(
    target: torch.nn.Module,
    input_ids: torch.Tensor | list[int],
    max_new_tokens: int,
    eos_token_id: int | Sequence[int] | None = None,
) -> list[int]:
    """Plain greedy decoding, one token per forward pass, with the same cache handling."""
    prompt = as_prompt(input_ids)
    cache = prefill(target, prompt)
    last, new = prompt[-1], []
    while len(new) < max_new_tokens and not ended(new, eos_token_id):
        logits = forward_tokens(target, cache, [last])  # (1, V)
        last = int(torch.argmax(logits[0]))
        new.append(last)
    return new


def prefill(target: torch.nn.Module, prompt: list[int]) -> Any:
    """A DynamicCache holding the prompt minus its last token.

    Only the cache is needed, so the output head runs on one position (`logits_to_keep`),
    not on the whole prompt (a (P, V) float tensor: 49k-262k columns here).
    """
    from transformers import DynamicCache

    if not prompt:
        raise ValueError("the prompt must contain at least one token")
    cache = DynamicCache()
    if len(prompt) > 1:
        ids = torch.tensor([prompt[:-1]], dtype=torch.long, device=target.device)  # (1, P-1)
        target(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return cache


def forward_tokens(target: torch.nn.Module, cache: Any, tokens: list[int]) -> torch.Tensor:
    """Feed `tokens` after the cached prefix; return their next-token logits.  # (T, V)"""
    ids = torch.tensor([tokens], dtype=torch.long, device=target.device)  # (1, T)
    out = target(input_ids=ids, past_key_values=cache, use_cache=True)
    return out.logits[0].cpu()


def _proposal(draft: Draft | None, drafts: list[int]) -> Any:
    """The draft's proposal distributions; one-hot if the drafter gave none."""
    if draft is None or draft.q is None:
        return one_hot(drafts)
    return draft.q


def as_prompt(input_ids: torch.Tensor | list[int]) -> list[int]:
    """One prompt's ids from a list, a (P,) tensor or a (1, P) tensor; batches are refused."""
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() > 2 or (input_ids.dim() == 2 and input_ids.shape[0] != 1):
            raise ValueError(
                f"speculative decoding here runs one prompt at a time (batch size 1); "
                f"got input_ids of shape {tuple(input_ids.shape)}"
            )
        return [int(t) for t in input_ids.reshape(-1)]
    return [int(t) for t in input_ids]


def stop_set(eos_token_id: int | Sequence[int] | None) -> set[int]:
    """The stop tokens as a set, from one id, several, or None."""
    if eos_token_id is None:
        return set()
    return {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(e) for e in eos_token_id}


def ended(tokens: list[int], eos_token_id: int | Sequence[int] | None) -> bool:
    """Did generation stop: is the last emitted token a stop token?"""
    return bool(tokens) and tokens[-1] in stop_set(eos_token_id)


def truncate_at_eos(tokens: list[int], eos_token_id: int | Sequence[int] | None) -> list[int]:
    """`tokens` up to and including the first stop token."""
    stops = stop_set(eos_token_id)
    for i, t in enumerate(tokens):
        if t in stops:
            return tokens[: i + 1]
    return tokens
