"""Rank allocation: uniform baseline and water-filling against a brute-force optimum."""

from __future__ import annotations

import itertools

import pytest
import torch

from kvspec.care.allocate import rank_limits, retained_energy, uniform_ranks, waterfill_ranks


def _spectra(seed: int, n: int, length: int) -> list[torch.Tensor]:
    """Descending singular values with very different decay rates per matrix."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        decay = torch.rand(1, generator=gen, dtype=torch.float64) * 1.5
        scale = torch.rand(1, generator=gen, dtype=torch.float64) * 3 + 0.1
        noise = torch.rand(length, generator=gen, dtype=torch.float64)
        values = scale * torch.exp(-decay * torch.arange(length)) * (1 + 0.3 * noise)
        out.append(torch.sort(values, descending=True).values)
    return out


def _brute_force(
    spectra: list[torch.Tensor], total: int, max_rank: int, min_rank: int = 1
) -> float:
    """max Σ_i Σ_{m ≤ r_i} σ² over all r with Σ r_i = total and min_rank ≤ r_i ≤ max_rank."""
    best = -1.0
    for ranks in itertools.product(range(min_rank, max_rank + 1), repeat=len(spectra)):
        if sum(ranks) == total:
            best = max(best, retained_energy(spectra, ranks))
    return best


def test_uniform_ranks():
    assert uniform_ranks(4, 3) == [3, 3, 3, 3]
    with pytest.raises(ValueError, match="n_matrices"):
        uniform_ranks(0, 3)
    with pytest.raises(ValueError, match="r must be"):
        uniform_ranks(2, 0)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [2, 3, 4])
def test_waterfill_equals_brute_force_optimum(seed, n):
    max_rank = 5
    spectra = _spectra(seed, n, max_rank)
    for total in range(n, n * max_rank + 1):
        ranks = waterfill_ranks(spectra, total, max_rank)
        assert sum(ranks) == total
        assert all(1 <= r <= max_rank for r in ranks)
        best = _brute_force(spectra, total, max_rank)
        assert retained_energy(spectra, ranks) == pytest.approx(best, rel=1e-12, abs=1e-12)


def test_waterfill_prefers_spectrally_rich_matrix():
    flat = torch.ones(8, dtype=torch.float64)  # every direction matters
    spiky = torch.tensor([10.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], dtype=torch.float64)
    assert waterfill_ranks([spiky, flat], 9, 8) == [1, 8]


def test_greedy_follows_next_singular_value():
    """Each step goes to the larger next σ (σ² and σ order the same way)."""
    a = torch.tensor([3.0, 2.0, 1.5], dtype=torch.float64)
    b = torch.tensor([3.0, 1.9, 1.8], dtype=torch.float64)
    assert waterfill_ranks([a, b], 3, 3) == [2, 1]
    assert waterfill_ranks([a, b], 4, 3) == [2, 2]
    assert waterfill_ranks([a, b], 5, 3) == [2, 3]


def test_ties_go_to_lower_index():
    same = torch.tensor([2.0, 1.0, 0.5], dtype=torch.float64)
    assert waterfill_ranks([same, same, same], 4, 3) == [2, 1, 1]
    assert waterfill_ranks([same, same, same], 5, 3) == [2, 2, 1]


def test_max_rank_caps_allocation():
    big = torch.full((10,), 100.0, dtype=torch.float64)
    small = torch.full((10,), 0.01, dtype=torch.float64)
    assert waterfill_ranks([big, small], 8, 4) == [4, 4]
    assert waterfill_ranks([big, small], 2, 1) == [1, 1]


def test_short_spectrum_is_zero_padded():
    short = torch.tensor([5.0], dtype=torch.float64)
    long = torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=torch.float64)
    assert waterfill_ranks([short, long], 6, 4) == [2, 4]


def test_unsorted_spectrum_is_sorted_first():
    messy = torch.tensor([0.1, 5.0, 0.2], dtype=torch.float64)
    other = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    assert waterfill_ranks([messy, other], 3, 3) == waterfill_ranks(
        [torch.sort(messy, descending=True).values, other], 3, 3
    )


def test_budget_errors():
    spectra = _spectra(0, 3, 4)
    with pytest.raises(ValueError, match=r"must lie in \[3, 12\]"):
        waterfill_ranks(spectra, 2, 4)
    with pytest.raises(ValueError, match=r"must lie in \[3, 12\]"):
        waterfill_ranks(spectra, 13, 4)
    with pytest.raises(ValueError, match="at least one spectrum"):
        waterfill_ranks([], 1, 4)
    with pytest.raises(ValueError, match="max_rank"):
        waterfill_ranks(spectra, 3, 0)
    with pytest.raises(ValueError, match="1-D"):
        waterfill_ranks([torch.ones(2, 2)], 1, 2)
    with pytest.raises(ValueError, match="non-negative"):
        waterfill_ranks([torch.tensor([1.0, -1.0])], 1, 2)
    with pytest.raises(ValueError, match="ranks"):
        retained_energy(spectra, [1, 1])


@pytest.mark.parametrize("seed", range(4))
def test_bounded_waterfill_equals_the_bounded_brute_force_optimum(seed):
    """The released CARE code's bounds [r/2, 2r]: every rank inside, the budget kept, and the
    best retained energy among bounded allocations (below the unbounded optimum's)."""
    spectra, r = _spectra(seed, 3, 12), 4
    ranks = waterfill_ranks(spectra, 3 * r, 2 * r, min_rank=r // 2)
    assert sum(ranks) == 3 * r and all(r // 2 <= x <= 2 * r for x in ranks)
    bounded = _brute_force(spectra, 3 * r, 2 * r, min_rank=r // 2)
    assert retained_energy(spectra, ranks) == pytest.approx(bounded, rel=1e-12)
    assert bounded <= _brute_force(spectra, 3 * r, 12) + 1e-12


def test_a_floor_binds_where_the_unbounded_allocation_starves_a_matrix():
    spectra = [torch.tensor([10.0, 9.0, 8.0, 7.0]), torch.tensor([1.0, 0.1, 0.01, 0.001])]
    assert waterfill_ranks(spectra, 4, 4) == [3, 1]
    assert waterfill_ranks(spectra, 4, 4, min_rank=2) == [2, 2]
    with pytest.raises(ValueError, match=r"\[6, 8\]"):
        waterfill_ranks(spectra, 4, 4, min_rank=3)


def test_rank_limits_round_inwards_and_stay_in_the_width():
    assert rank_limits(96, 192) == (1, 192)  # no bounds: the thesis's Algorithm 2
    assert rank_limits(96, 192, [0.5, 2.0]) == (48, 192)  # 2r capped at the width
    assert rank_limits(5, 64, [0.5, 2.0]) == (3, 10)
    assert rank_limits(5, 64, [1.0, 1.0]) == (5, 5)
