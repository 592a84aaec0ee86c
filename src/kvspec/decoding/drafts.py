"""Drafts: what a drafter proposes, and the protocol every drafter follows.

Every drafter has `propose(context, k) -> Draft`. Deterministic drafters report one-hot
proposal distributions `q`; sampling drafters report the distribution each token was drawn
from, which is what rejection sampling needs to stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

Dist = dict[int, float]


@dataclass
class Draft:
    """Proposed tokens, their proposal distributions, and how the proposal was found.

    `q[i]` is the distribution `tokens[i]` was drawn from: a dict, or a row of a (k, V)
    tensor. `match_len`/`match_count` describe the lookup (suffix length and number of
    matches; 0 for model drafters). `dists` keeps the n-gram distributions of an
    infini-gram draft even when `q` is one-hot, for acceptance analysis.
    """

    tokens: list[int]
    q: list[Dist] | torch.Tensor | None
    match_len: int = 0
    match_count: int = 0
    dists: list[Dist] | None = None
    lengths: list[int] | None = None  # match length behind each token (n-gram drafters)
    confidence: list[float] | None = None  # model drafters: top-1 probability at each step


class Drafter(Protocol):
    """Anything that proposes up to `k` tokens to follow `context`."""

    def propose(self, context: list[int], k: int) -> Draft: ...


def one_hot(tokens: list[int]) -> list[Dist]:
    """Point-mass proposal distributions for deterministically drafted tokens."""
    return [{t: 1.0} for t in tokens]
