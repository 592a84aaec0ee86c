"""Adaptive draft depth: draft only tokens likely to be accepted, for any drafter.

A drafted token costs a verification position whether or not it is accepted, so a draft
should stop where the estimated probability that the next token is still accepted (the
product of per-token estimates) falls below `threshold`; a drafter with nothing good to
propose then proposes nothing and the step costs what a greedy step costs.

Per-token estimates come from a `Calibration`: P(greedy acceptance | source, match-length
bin, confidence bin), a Beta posterior whose prior counts are the workflow's own acceptance
rows (`suffix_len`, `q_top1`, and whether the n-gram mode was the target's token; see
`kvspec.eval.acceptance`) and which keeps learning from the verifier's verdicts
(`feedback`): after a rejection the same kind of draft is trusted less. `source` tells
drafters apart ("index": infini-gram, "local": prompt lookup, "model": a draft model).

With several drafters (`AdaptiveDrafter({"local": ..., "index": ...})`, the request-local
+ index hybrid), each proposes, each draft is cut at the threshold, and the one with the
largest expected number of accepted tokens is used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kvspec.spec.drafters import Draft, Drafter, one_hot

LENGTH_EDGES = (0, 1, 2, 3, 4, 6, 8, 12, 16, 32)  # bin i: LENGTH_EDGES[i] <= len < next
CONF_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 0.95)  # bin i: CONF_EDGES[i] <= top-1 prob < next
Bin = tuple[str, int, int]  # (source, length bin, confidence bin)


def _bin(edges: Sequence[float], value: float) -> int:
    return int(np.searchsorted(edges, value, side="right")) - 1


@dataclass
class Calibration:
    """Beta(prior_hits + hits + 1, prior_misses + misses + 1) per (source, length, confidence)."""

    counts: dict[Bin, list[float]] = field(default_factory=dict)  # bin -> [hits, misses]
    prior_weight: float = 1.0

    def estimate(self, source: str, length: int, confidence: float) -> float:
        """Posterior mean probability that a token drafted from this bin is accepted."""
        hits, misses = self.counts.get(self.key(source, length, confidence), (0.0, 0.0))
        return (hits + 1.0) / (hits + misses + 2.0)

    def update(self, source: str, length: int, confidence: float, hit: bool) -> None:
        """Count one verdict of the verifier."""
        entry = self.counts.setdefault(self.key(source, length, confidence), [0.0, 0.0])
        entry[0 if hit else 1] += 1.0

    @staticmethod
    def key(source: str, length: int, confidence: float) -> Bin:
        return source, _bin(LENGTH_EDGES, length), _bin(CONF_EDGES, confidence)

    @classmethod
    def from_rows(cls, rows: Any, source: str = "index", weight: float = 1.0) -> Calibration:
        """Prior counts from acceptance rows (columns suffix_len, q_top1, q_mode, token).

        A row is a hit when the n-gram's mode is the target's greedy token (what greedy
        verification accepts). `weight` scales the prior counts (0.1: ten table rows are
        worth one verdict seen while decoding).
        """
        cal = cls(prior_weight=weight)
        rows = rows[rows["q_top1"] > 0]  # positions with no n-gram distribution
        hit = (rows["q_mode"] == rows["token"]).to_numpy()
        for length, conf, h in zip(rows["suffix_len"], rows["q_top1"], hit, strict=True):
            entry = cal.counts.setdefault(cls.key(source, int(length), float(conf)), [0.0, 0.0])
            entry[0 if h else 1] += weight
        return cal


@dataclass
class _Scored:
    source: str
    draft: Draft
    probs: list[float]  # estimated acceptance of each kept token, given the earlier ones

    @property
    def expected(self) -> float:
        """Expected number of accepted tokens: the sum of cumulative products."""
        return float(np.sum(np.cumprod(self.probs))) if self.probs else 0.0


class AdaptiveDrafter:
    """Draft from one or several drafters, cut each draft where acceptance gets unlikely.

    `drafters`: source name -> drafter. `threshold`: keep draft token j only while the
    product of the estimates of tokens 0..j is at least this. The decoding loop calls
    `feedback(drafted, accepted)` after every verification.
    """

    def __init__(
        self,
        drafters: Mapping[str, Drafter],
        calibration: Calibration | None = None,
        threshold: float = 0.2,
    ) -> None:
        if not drafters:
            raise ValueError("AdaptiveDrafter needs at least one drafter")
        self.drafters = dict(drafters)
        self.calibration = calibration or Calibration()
        self.threshold = threshold
        self._last: _Scored | None = None
        self.chosen: dict[str, int] = dict.fromkeys(self.drafters, 0)

    def propose(self, context: list[int], k: int) -> Draft:
        """The best cut draft of any drafter (empty if none is worth verifying)."""
        scored = [self._cut(name, d.propose(context, k)) for name, d in self.drafters.items()]
        best = max(scored, key=lambda s: s.expected)
        self._last = best
        if best.probs:
            self.chosen[best.source] += 1
        return best.draft

    def feedback(self, drafted: int, accepted: int) -> None:
        """Learn from the verifier: kept tokens 0..accepted-1 hit, token `accepted` missed."""
        last, self._last = self._last, None
        if last is None or not drafted:
            return
        for j in range(min(drafted, accepted + 1)):
            length, conf = _features(last.draft, j)
            self.calibration.update(last.source, length, conf, j < accepted)

    def _cut(self, source: str, draft: Draft) -> _Scored:
        probs: list[float] = []
        running = 1.0
        for j in range(len(draft.tokens)):
            p = self.calibration.estimate(source, *_features(draft, j))
            if running * p < self.threshold:
                break
            running *= p
            probs.append(p)
        return _Scored(source, _truncate(draft, len(probs)), probs)


def _features(draft: Draft, j: int) -> tuple[int, float]:
    """(match length, confidence) behind draft token j; (0, 1.0) when the drafter has none."""
    length = draft.lengths[j] if draft.lengths else draft.match_len
    conf = max(draft.dists[j].values()) if draft.dists and draft.dists[j] else 1.0
    return int(length), float(conf)


def _truncate(draft: Draft, n: int) -> Draft:
    """The first n tokens of a draft, with the matching proposal rows."""
    if n == len(draft.tokens):
        return draft
    q = draft.q[:n] if draft.q is not None else one_hot(draft.tokens[:n])
    return replace(
        draft,
        tokens=draft.tokens[:n],
        q=q,
        dists=draft.dists[:n] if draft.dists else draft.dists,
        lengths=draft.lengths[:n] if draft.lengths else draft.lengths,
    )
