"""Greedy verification and rejection sampling (which must preserve the target distribution)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from kvspec.decoding import verify
from kvspec.decoding.verify import residual, verify_greedy, verify_sampling

P = torch.tensor([0.05, 0.40, 0.25, 0.10, 0.20], dtype=torch.float64)
Q = torch.tensor([0.30, 0.10, 0.25, 0.30, 0.05], dtype=torch.float64)
DRAWS = 20_000


def test_verify_greedy_accepts_matching_prefix():
    logits = torch.full((4, 6), -1.0)
    for row, best in enumerate([2, 5, 1, 0]):
        logits[row, best] = 1.0
    assert verify_greedy(logits, [2, 5, 1]) == (3, 0)  # all accepted, bonus token
    assert verify_greedy(logits, [2, 4, 1]) == (1, 5)  # correction at the first mismatch
    assert verify_greedy(logits, [3, 5, 1]) == (0, 2)
    assert verify_greedy(logits[:1], []) == (0, 2)


def _first_token_counts(verifier, q, seed: int, q_as_dict: bool = False) -> np.ndarray:
    """Histogram of the first emitted token when drafting one token from q."""
    gen = torch.Generator().manual_seed(seed)
    target = torch.stack([P, P])  # (2, V): the row after the draft is unused here
    q_arg = [{i: float(v) for i, v in enumerate(q) if v > 0}] if q_as_dict else q[None]
    counts = np.zeros(len(P), dtype=np.int64)
    for _ in range(DRAWS):
        draft = int(torch.multinomial(q, 1, generator=gen))
        n_acc, nxt = verifier(target, [draft], q_arg, gen)
        counts[draft if n_acc == 1 else nxt] += 1
    return counts


@pytest.mark.parametrize("q_as_dict", [False, True])
def test_rejection_sampling_preserves_target(q_as_dict):
    counts = _first_token_counts(verify_sampling, Q, seed=0, q_as_dict=q_as_dict)
    assert chisquare(counts, P.numpy() * DRAWS).pvalue > 0.001


def test_rejection_sampling_with_disjoint_and_point_mass_drafts():
    point = torch.tensor([0.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64)  # a greedy draft
    counts = _first_token_counts(verify_sampling, point, seed=1)
    assert chisquare(counts, P.numpy() * DRAWS).pvalue > 0.001


def test_chi_square_detects_a_wrong_verifier(monkeypatch):
    # Accept with min(1, p/q) but resample from p instead of the residual: biased towards
    # tokens the draft over-proposes. The same test must reject it.
    monkeypatch.setattr(verify, "residual", lambda p, q: p / p.sum())
    counts = _first_token_counts(verify_sampling, Q, seed=0)
    assert chisquare(counts, P.numpy() * DRAWS).pvalue < 1e-6


def test_bonus_token_follows_last_row():
    gen = torch.Generator().manual_seed(2)
    target = torch.stack([torch.eye(5, dtype=torch.float64)[1], P])  # (2, V)
    counts = np.zeros(5, dtype=np.int64)
    for _ in range(5_000):
        n_acc, nxt = verify_sampling(target, [1], [{1: 1.0}], gen)
        assert n_acc == 1  # p(1) = 1 = q(1): always accepted
        counts[nxt] += 1
    assert chisquare(counts, P.numpy() * 5_000).pvalue > 0.001


def test_residual_is_normalised_positive_part():
    r = residual(P, Q)
    expected = torch.clamp(P - Q, min=0)
    assert torch.allclose(r, expected / expected.sum())
    assert torch.allclose(residual(P, P), P)


# ------------------------------------------- k = 2: the joint law of the first two tokens


def _broken(bug: str):
    """verify_sampling with one deliberate bug: the first draft's q row for every draft
    ("draft_row") or the target row after the draft instead of before it ("target_row")."""

    def verifier(target_probs, draft_tokens, draft_q, generator=None):
        k = len(draft_tokens)
        probs = target_probs.double()
        for i, token in enumerate(draft_tokens):
            q_row = verify.q_vector(draft_q, 0 if bug == "draft_row" else i, probs.shape[-1])
            p_row = probs[i + 1] if bug == "target_row" else probs[i]
            u = float(torch.rand((), generator=generator, dtype=torch.float64))
            if q_row[token] > 0 and u * q_row[token] < p_row[token]:
                continue
            return i, int(torch.multinomial(residual(p_row, q_row), 1, generator=generator))
        return k, int(torch.multinomial(probs[k], 1, generator=generator))

    return verifier


def _markov(seed: int, n: int = 4, alpha: float = 0.6) -> torch.Tensor:
    """(n, n) random transition matrix: row a is the next-token law after token a."""
    torch.manual_seed(seed)
    return torch.distributions.Dirichlet(torch.full((n,), alpha)).sample((n,)).double()


def _two_token_counts(verifier, p: torch.Tensor, q: torch.Tensor, draws: int) -> np.ndarray:
    """Histogram of the first two emitted tokens after token 0, drafting k = 2 from chain q
    and verifying against chain p; a step that emits one token is followed by a plain
    sample (what any exact next step emits)."""
    torch.manual_seed(5)
    gen = torch.Generator().manual_seed(6)
    n = len(p)
    counts = np.zeros((n, n), dtype=np.int64)
    for _ in range(draws):
        x0 = int(torch.multinomial(q[0], 1, generator=gen))
        x1 = int(torch.multinomial(q[x0], 1, generator=gen))
        rows = torch.stack([p[0], p[x0], p[x1]])  # (3, V): after 0, after x0, after x1
        n_acc, nxt = verifier(rows, [x0, x1], torch.stack([q[0], q[x0]]), gen)
        out = [x0, x1][:n_acc] + [nxt]
        if len(out) < 2:
            out.append(int(torch.multinomial(p[out[0]], 1, generator=gen)))
        counts[out[0], out[1]] += 1
    return counts


def test_two_token_joint_law_is_the_targets_and_broken_verifiers_fail():
    p, q = _markov(1), _markov(2)
    law = (p[0][:, None] * p).numpy().ravel()  # (V*V,): p(a | 0) p(b | a)
    expected = law / law.sum() * 12_000
    ok = _two_token_counts(verify_sampling, p, q, 12_000)
    assert chisquare(ok.ravel(), expected).pvalue > 0.001
    for bug in ("draft_row", "target_row"):
        bad = _two_token_counts(_broken(bug), p, q, 12_000)
        assert chisquare(bad.ravel(), expected).pvalue < 1e-6, bug
