"""Rank allocation across the K/V matrices of a model: uniform, or water-filling on spectra.

Water-filling (thesis Algorithm 2) starts every matrix at rank 1 (or a floor) and spends the
remaining budget one rank at a time on the matrix whose next singular value carries the most
energy (σ², the squared activation-weighted singular value). Because every spectrum is sorted in
descending order the marginal gains are non-increasing, so this greedy choice maximises the
total retained energy Σ_i Σ_{m ≤ r_i} σ_{i,m}² exactly.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import torch
from torch import Tensor


def _check_int(name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def uniform_ranks(n_matrices: int, r: int) -> list[int]:
    """The same rank `r` for each of `n_matrices` matrices (the baseline allocation)."""
    _check_int("n_matrices", n_matrices, 1)
    _check_int("r", r, 1)
    return [r] * n_matrices


def _energies(spectrum: Tensor, max_rank: int) -> list[float]:
    """σ² of the first `max_rank` singular values, sorted descending, zero-padded."""
    if spectrum.ndim != 1:
        raise ValueError(f"each spectrum must be 1-D, got shape {tuple(spectrum.shape)}")
    values = spectrum.detach().to(torch.float64).cpu()
    if not torch.isfinite(values).all() or (values < 0).any():
        raise ValueError("singular values must be finite and non-negative")
    energy = torch.sort(values, descending=True).values[:max_rank].square().tolist()
    return energy + [0.0] * (max_rank - len(energy))


def waterfill_ranks(
    spectra: Sequence[Tensor], total: int, max_rank: int, min_rank: int = 1
) -> list[int]:
    """Ranks r_i (min_rank ≤ r_i ≤ max_rank, Σ r_i = total) maximising the retained energy Σ σ².

    Every matrix starts at `min_rank` (1: the thesis's Algorithm 2; the released CARE code
    bounds its dynamic ranks to [r/2, 2r]). Ties go to the matrix with the lower index, so the
    result is deterministic.
    """
    n = len(spectra)
    if n == 0:
        raise ValueError("need at least one spectrum")
    _check_int("min_rank", min_rank, 1)
    _check_int("max_rank", max_rank, min_rank)
    _check_int("total", total, 0)
    if not n * min_rank <= total <= n * max_rank:
        raise ValueError(
            f"total rank budget {total} must lie in [{n * min_rank}, {n * max_rank}] "
            f"for {n} matrices with ranks in [{min_rank}, {max_rank}]"
        )
    energies = [_energies(s, max_rank) for s in spectra]
    ranks = [min_rank] * n
    # min-heap on (-energy of the next singular value, matrix index)
    heap = [(-e[min_rank], i) for i, e in enumerate(energies) if max_rank > min_rank]
    heapq.heapify(heap)
    for _ in range(total - n * min_rank):
        _, i = heapq.heappop(heap)
        ranks[i] += 1
        if ranks[i] < max_rank:
            heapq.heappush(heap, (-energies[i][ranks[i]], i))
    return ranks


def rank_limits(rank: int, width: int, bounds: Sequence[float] | None = None) -> tuple[int, int]:
    """[min, max] rank of a water-filled matrix whose mean rank is `rank`: [1, width], or
    [⌈lo·rank⌉, ⌊hi·rank⌋] within it for `bounds` (lo, hi) with lo ≤ 1 ≤ hi (the released
    CARE code's dynamic ranks: [0.5, 2.0])."""
    if not bounds:
        return 1, width
    low, high = max(1, math.ceil(bounds[0] * rank)), min(width, math.floor(bounds[1] * rank))
    return min(low, rank), max(high, rank)


def retained_energy(spectra: Sequence[Tensor], ranks: Sequence[int]) -> float:
    """Σ_i Σ_{m ≤ r_i} σ_{i,m}², the objective that water-filling maximises."""
    if len(spectra) != len(ranks):
        raise ValueError(f"{len(spectra)} spectra but {len(ranks)} ranks")
    return sum(_sum_top(s, r) for s, r in zip(spectra, ranks, strict=True))


def _sum_top(spectrum: Tensor, r: int) -> float:
    top = torch.sort(spectrum.detach().to(torch.float64), descending=True).values[:r]
    return float(top.square().sum())
