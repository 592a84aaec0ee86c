"""Verification of drafted tokens against the target model's next-token distributions.

Greedy verification keeps the longest drafted prefix that matches the target's argmax.
Stochastic verification is speculative (rejection) sampling: every emitted token is
distributed exactly as if sampled from the target alone, whatever the draft distribution.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvspec.decoding.warp import draw

Dist = dict[int, float]


def verify_greedy(target_logits: torch.Tensor, draft_tokens: Sequence[int]) -> tuple[int, int]:
    """Return (accepted drafts, next token) for greedy decoding.

    `target_logits` is (k+1, V): row i scores the token after the i-th draft prefix.
    The next token is the target's argmax after the accepted prefix: the correction on a
    rejection, the bonus token if every draft was accepted.
    """
    k = len(draft_tokens)
    choice = torch.argmax(target_logits[: k + 1], dim=-1)  # (k+1,)
    drafts = torch.as_tensor(list(draft_tokens), dtype=choice.dtype)  # (k,)
    mismatch = torch.nonzero(choice[:k] != drafts).flatten()
    n_accepted = int(mismatch[0]) if len(mismatch) else k
    return n_accepted, int(choice[n_accepted])


def verify_sampling(
    target_probs: torch.Tensor,
    draft_tokens: Sequence[int],
    draft_q: torch.Tensor | Sequence[Dist],
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """Return (accepted drafts, next token) by speculative rejection sampling.

    `target_probs` is (k+1, V); `draft_q` gives the distribution each draft was sampled
    from, as a (k, V) tensor or one sparse dict per draft. Draft i is accepted with
    probability min(1, p_i(x)/q_i(x)); the first rejection is replaced by a sample from
    the normalised residual max(0, p_i - q_i); if all k are accepted a bonus token is
    sampled from p_k.
    """
    k = len(draft_tokens)
    probs = target_probs.double()  # (k+1, V)
    for i, token in enumerate(draft_tokens):
        q_row = q_vector(draft_q, i, probs.shape[-1])  # (V,)
        p_x, q_x = float(probs[i, token]), float(q_row[token])
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        if q_x > 0 and u * q_x < p_x:  # u < p/q without dividing
            continue
        return i, _sample(residual(probs[i], q_row), generator)
    return k, _sample(probs[k], generator)


def q_vector(draft_q: torch.Tensor | Sequence[Dist], i: int, vocab: int) -> torch.Tensor:
    """Row i of the draft distributions as a dense float64 vector.  # (V,)"""
    if isinstance(draft_q, torch.Tensor):
        return draft_q[i].double()
    row = torch.zeros(vocab, dtype=torch.float64)
    for token, prob in draft_q[i].items():
        row[int(token)] = prob
    return row


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Normalised max(0, p - q): what is left of p where the draft under-proposes.  # (V,)

    Falls back to p when p <= q everywhere (only possible if p == q, where rejection
    cannot happen anyway except through rounding).
    """
    r = torch.clamp(p - q, min=0.0)
    total = float(r.sum())
    return r / total if total > 0 else p / p.sum()


def _sample(p: torch.Tensor, generator: torch.Generator | None) -> int:
    return draw(p, generator)


def verify_resample_model(
    target_probs: torch.Tensor,
    draft_tokens: Sequence[int],
    draft_q: torch.Tensor | Sequence[Dist],
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """Document 004's Algorithm 2 as printed: the same acceptance test, but a rejected draft is
    replaced by a sample from the verifying model itself instead of the residual. Not exact: it
    emits the tokens the draft over-proposes too often. Kept to measure what that costs."""
    k = len(draft_tokens)
    probs = target_probs.double()  # (k+1, V)
    for i, token in enumerate(draft_tokens):
        q_x = float(q_vector(draft_q, i, probs.shape[-1])[token])
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        if q_x > 0 and u * q_x < float(probs[i, token]):
            continue
        return i, _sample(probs[i], generator)
    return k, _sample(probs[k], generator)
