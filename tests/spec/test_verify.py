"""Greedy verification and rejection sampling (which must preserve the target distribution)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from kvspec.spec import verify
from kvspec.spec.verify import residual, verify_greedy, verify_sampling

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
