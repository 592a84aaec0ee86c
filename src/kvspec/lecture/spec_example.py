"""Speculative sampling as the lecture works it (section 3.1): the "quick brown" example,
the exactness proof checked empirically, and the expected accepted length vs measured.

The verifier is the study's own (`kvspec.decoding.verify.verify_sampling`). Two deliberately wrong
verifiers (accept every draft; resample a rejection from the target instead of the residual)
run beside it, so the chi-square test shows it can tell an exact sampler from a wrong one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from scipy.stats import chi2

from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.decoding.loop import speculative_generate
from kvspec.decoding.verify import residual, verify_resample_model, verify_sampling
from kvspec.decoding.warp import draw
from kvspec.seeds import derive

Verifier = Callable[[torch.Tensor, list[int], torch.Tensor, torch.Generator], tuple[int, int]]

# Vocabulary of the worked example. The lecture gives p(quick) = 0.6, q(quick) = 0.7,
# p(brown) = 0.8, q(brown) = 0.4; the rest of each distribution is our completion.
WORDS = ["quick", "slow", "brown", "blue", "red"]
QUICK_BROWN_P = [[0.6, 0.4, 0.0, 0.0, 0.0], [0.0, 0.0, 0.8, 0.1, 0.1]]  # draft, positions 1-2
QUICK_BROWN_Q = [[0.7, 0.3, 0.0, 0.0, 0.0], [0.0, 0.0, 0.4, 0.4, 0.2],  # target, 1-2
                 [0.2, 0.2, 0.2, 0.2, 0.2]]  # and the bonus position  # fmt: skip
BINARY_P, BINARY_Q = [[0.7, 0.3]], [[0.4, 0.6], [0.5, 0.5]]  # the proof's {A, B}, p(A) > q(A)


def accept_all(target: torch.Tensor, drafts: list[int], q: torch.Tensor,
               gen: torch.Generator) -> tuple[int, int]:  # fmt: skip
    """Wrong: keeps every draft (outputs follow the draft distribution)."""
    return len(drafts), draw(target[len(drafts)], gen)


VERIFIERS: dict[str, Verifier] = {
    "verify_sampling (ours)": verify_sampling,
    "wrong: accept every draft": accept_all,
    "wrong: resample the target on rejection": verify_resample_model,
}


def simulate(p_rows: list[list[float]], q_rows: list[list[float]], verifier: Verifier,
             trials: int, seed: int) -> dict[str, Any]:  # fmt: skip
    """Draft every position from p, verify against q; count per position the emitted tokens
    (position i counted only when every earlier draft was accepted, where its exact law is
    q_i) and the acceptance of each drafted token."""
    draft_gen = torch.Generator().manual_seed(derive(seed, "draft"))
    verify_gen = torch.Generator().manual_seed(derive(seed, "verify"))
    p = torch.tensor(p_rows, dtype=torch.float64)  # (k, V)
    q = torch.tensor(q_rows, dtype=torch.float64)  # (k+1, V)
    emitted = [Counter() for _ in p_rows]
    drafted = [Counter() for _ in p_rows]
    accepted = [Counter() for _ in p_rows]
    for _ in range(trials):
        drafts = [draw(row, draft_gen) for row in p]
        n_acc, nxt = verifier(q, drafts, p, verify_gen)
        for i, token in enumerate(drafts[: n_acc + 1]):
            drafted[i][token] += 1
            accepted[i][token] += i < n_acc
            emitted[i][token if i < n_acc else nxt] += 1
    return {"emitted": emitted, "drafted": drafted, "accepted": accepted}


def chi_square(counts: Counter, expected: list[float]) -> tuple[float, float]:
    """(statistic, p-value) of counts against `expected` probabilities (zero cells dropped;
    a count where the law says zero gives p = 0)."""
    support = [t for t, e in enumerate(expected) if e > 0]
    if any(counts[t] for t in counts if t not in support):
        return float("inf"), 0.0
    n = sum(counts.values())
    observed = [counts[t] for t in support]
    stat = sum(
        (o - n * expected[t]) ** 2 / (n * expected[t])
        for o, t in zip(observed, support, strict=True)
    )
    df = len(support) - 1
    return float(stat), float(chi2.sf(stat, df)) if df >= 1 else 1.0


def exactness_rows(p_rows: list[list[float]], q_rows: list[list[float]], example: str,
                   trials: int, seed: int) -> list[dict[str, Any]]:  # fmt: skip
    """Per verifier and position: emitted distribution vs the target's, chi-square p-value."""
    rows = []
    for name, verifier in VERIFIERS.items():
        counts = simulate(p_rows, q_rows, verifier, trials, derive(seed, example, name))
        for i, observed in enumerate(counts["emitted"]):
            stat, pvalue = chi_square(observed, q_rows[i])
            n = sum(observed.values())
            rows.append({"example": example, "verifier": name, "position": i + 1, "n": n,
                         "emitted": {t: observed[t] / n for t in sorted(observed)},
                         "target": {t: q for t, q in enumerate(q_rows[i]) if q > 0},
                         "chi2": stat, "p_value": pvalue})  # fmt: skip
    return rows


def acceptance_rows(trials: int, seed: int) -> list[dict[str, Any]]:
    """The worked example's acceptance probabilities: min(1, q/p) in theory, measured with
    our verifier (acceptance of "quick" drafted first; of "brown" drafted after an accepted
    "quick"), and the residual a rejected "brown" is resampled from."""
    counts = simulate(
        QUICK_BROWN_P, QUICK_BROWN_Q, verify_sampling, trials, derive(seed, "acceptance")
    )
    rows = []
    for pos, word in ((0, "quick"), (1, "brown")):
        t = WORDS.index(word)
        p, q = QUICK_BROWN_P[pos][t], QUICK_BROWN_Q[pos][t]
        n = counts["drafted"][pos][t]
        rows.append({"token": word, "p_draft": p, "q_target": q, "alpha_theory": min(1.0, q / p),
                     "alpha_measured": counts["accepted"][pos][t] / n, "n": n})  # fmt: skip
    res = residual(torch.tensor(QUICK_BROWN_Q[1]), torch.tensor(QUICK_BROWN_P[1]))
    rows.append(
        {
            "token": "residual after rejecting brown",
            "distribution": {WORDS[t]: float(v) for t, v in enumerate(res) if v > 0},
        }
    )
    return rows


# ---- expected accepted length on real models -------------------------------------------------
def expected_tokens(alpha: float, k: int) -> float:
    """Tokens per verification when each draft is accepted with probability α independently:
    (1 − α^{k+1}) / (1 − α) (Leviathan et al.; the bonus token included)."""
    return float(k + 1) if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


@torch.inference_mode()
def alpha_along(target: torch.nn.Module, draft: torch.nn.Module, ids: list[int], start: int,
                temperature: float) -> torch.Tensor:  # fmt: skip
    """Σ_x min(p(x), q(x)) at every position from `start` on (target p, draft q, both at
    `temperature`): the probability a draft token sampled there is accepted.  # (T - start,)"""
    x = torch.tensor([ids], device=target.device)  # (1, T)
    p = torch.softmax(target(input_ids=x).logits[0, start - 1 : -1].double() / temperature, -1)
    q = torch.softmax(draft(input_ids=x).logits[0, start - 1 : -1].double() / temperature, -1)
    return torch.minimum(p, q).sum(-1).cpu()


def measured_rows(target: torch.nn.Module, draft: torch.nn.Module, prompts: list[list[int]],
                  ks: list[int], max_new_tokens: int, temperature: float, stops: list[int],
                  seed: int) -> list[dict[str, Any]]:  # fmt: skip
    """Per k: tokens per verification measured with draft-model speculative sampling beside
    (1 − α^{k+1})/(1 − α), α measured along the target's own sampled continuations."""
    alphas, runs = [], {k: [0, 0] for k in ks}
    for i, prompt in enumerate(prompts):
        for k in ks:
            drafter = DraftModelDrafter(draft, sample=True, temperature=temperature,
                                        seed=derive(seed, "draft", i, k))  # fmt: skip
            new, steps = speculative_generate(target, prompt, drafter, max_new_tokens, k,
                                              mode="sample", temperature=temperature,
                                              eos_token_id=stops,
                                              seed=derive(seed, "verify", i, k))  # fmt: skip
            runs[k][0] += len(new)
            runs[k][1] += len(steps)
            if k == ks[0] and new:
                alphas.append(alpha_along(target, draft, prompt + new, len(prompt), temperature))
    alpha = float(torch.cat(alphas).mean())
    return [{"k": k, "alpha": alpha, "expected_tokens_per_step": expected_tokens(alpha, k),
             "measured_tokens_per_step": tokens / steps, "tokens": tokens, "steps": steps}
            for k, (tokens, steps) in runs.items()]  # fmt: skip
